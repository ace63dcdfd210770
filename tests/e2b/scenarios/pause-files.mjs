// Needs envd (commands): a file written and a process started before a
// pause are still there after Sandbox.connect(id) resumed it.
// Usage: pause-files.mjs [TEMPLATE]
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { scenario, step, runTag } from './lib.mjs'

const template = process.argv[2]

await scenario('pause keeps files and processes', async (cleanups) => {
  const sbx = template === undefined ? await Sandbox.create() : await Sandbox.create(template)
  cleanups.push(sbx)
  step(`created ${sbx.sandboxId}`)
  const root = { user: 'root' }
  const w = await sbx.commands.run(`echo ${runTag} > /root/f`, root)
  assert.equal(w.exitCode, 0, `writing /root/f: ${JSON.stringify(w)}`)
  const bg = await sbx.commands.run('sleep 3600', { ...root, background: true })
  step(`wrote /root/f; background sleep pid ${bg.pid}`)

  assert.equal(await sbx.pause(), true, 'pause()')
  assert.equal((await sbx.getInfo()).state, 'paused')
  step('paused')
  const back = await Sandbox.connect(sbx.sandboxId)
  assert.equal((await back.getInfo()).state, 'running')
  step('resumed')

  const r = await back.commands.run('cat /root/f', root)
  assert.equal(r.stdout, `${runTag}\n`, `cat /root/f after the resume: ${JSON.stringify(r)}`)
  const procs = await back.commands.list()
  assert.ok(procs.some((p) => p.pid === bg.pid),
    `the background process ${bg.pid} is gone after the resume: ${JSON.stringify(procs)}`)
  await back.commands.kill(bg.pid)
})
