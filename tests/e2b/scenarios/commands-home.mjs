// Needs envd: without cwd a command runs in the home directory of its user
// (the SDK's CommandStartOpts.cwd: "@default home directory of the user
// used to start the command"), the same directory relative file paths are
// resolved against: a file written as 'notes.txt' is there for `cat
// notes.txt`. With and without user.
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { scenario, step, runTag } from './lib.mjs'

await scenario('default cwd is the home', async (cleanups) => {
  const sbx = await Sandbox.create()
  cleanups.push(sbx)
  step(`created ${sbx.sandboxId}`)
  const w = await sbx.files.write('notes.txt', `${runTag}\n`)
  step(`files.write('notes.txt'): ${w.path}`)
  for (const opts of [{}, { user: 'root' }]) {
    const r = await sbx.commands.run('echo "$HOME"; pwd', opts)
    step(`${JSON.stringify(opts)}: ${JSON.stringify(r.stdout)}`)
    const [home, pwd] = r.stdout.trim().split('\n')
    assert.equal(pwd, home, `with ${JSON.stringify(opts)} a command without cwd runs in ${pwd}, not in its home ${home}`)
    assert.equal(w.path, `${home}/notes.txt`, 'a relative path is not in the home')
    const cat = await sbx.commands.run('cat notes.txt', opts)
    assert.equal(cat.stdout, `${runTag}\n`)
  }
})
