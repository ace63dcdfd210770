// Needs envd: sandbox.pty. create({cols, rows, onData}) starts an
// interactive bash on a terminal of that size; sendInput types into it and
// onData gets the terminal's output; resize changes the size `stty size`
// reports; pty.connect gets its output too; kill ends it (true, then
// false).
import assert from 'node:assert/strict'
import { CommandExitError, Sandbox } from 'e2b'
import { scenario, step, rejects, until } from './lib.mjs'

await scenario('pty', async (cleanups) => {
  const sbx = await Sandbox.create()
  cleanups.push(sbx)
  step(`created ${sbx.sandboxId}`)
  let out = ''
  const decoder = new TextDecoder()
  const enc = (s) => new TextEncoder().encode(s)
  const term = await sbx.pty.create({
    cols: 80, rows: 24,
    onData: (d) => {
      assert.ok(d instanceof Uint8Array, 'onData gets bytes')
      out += decoder.decode(d, { stream: true })
    },
  })
  step(`pty pid ${term.pid}`)
  assert.ok(Number.isInteger(term.pid) && term.pid > 0)
  // typed input is run: the answer (42) only the shell can compute
  await sbx.pty.sendInput(term.pid, enc('echo hi-$((40+2))\n'))
  await until(() => out.includes('hi-42'), 20_000, `"hi-42" in the terminal (${JSON.stringify(out)})`)
  // the size create asked for
  out = ''
  await sbx.pty.sendInput(term.pid, enc('stty size\n'))
  await until(() => /\b24 80\b/.test(out), 10_000, `stty size says 24 80 (${JSON.stringify(out)})`)
  // an environment of a terminal (the SDK sets TERM unless told)
  out = ''
  await sbx.pty.sendInput(term.pid, enc('echo "term=$TERM tty=$(tty)"\n'))
  await until(() => /term=xterm-256color tty=\/dev\/pts\/\d+/.test(out), 10_000, `TERM and tty (${JSON.stringify(out)})`)
  // listed while it runs
  const procs = await sbx.commands.list()
  assert.ok(procs.some((p) => p.pid === term.pid), `the pty is not in commands.list(): ${JSON.stringify(procs)}`)
  // resize
  await sbx.pty.resize(term.pid, { cols: 100, rows: 30 })
  out = ''
  await sbx.pty.sendInput(term.pid, enc('stty size\n'))
  await until(() => /\b30 100\b/.test(out), 10_000, `stty size says 30 100 after resize (${JSON.stringify(out)})`)
  step('resized to 100x30')
  // pty.connect: a second handle gets what the terminal writes from then on
  let out2nd = ''
  const second = await sbx.pty.connect(term.pid, { onData: (d) => { out2nd += new TextDecoder().decode(d) } })
  assert.equal(second.pid, term.pid)
  await sbx.pty.sendInput(term.pid, enc('echo via-$((1+1))\n'))
  await until(() => out2nd.includes('via-2'), 10_000, `"via-2" through pty.connect (${JSON.stringify(out2nd)})`)
  // kill
  assert.equal(await sbx.pty.kill(term.pid), true, 'pty.kill of the running terminal')
  const end = await rejects(term.wait(), CommandExitError, "the killed terminal's wait()")
  step(`ended: ${end.error}`)
  assert.equal(await sbx.pty.kill(term.pid), false, 'pty.kill of a gone terminal')
  // a terminal that ends by itself: exit 0 is a result
  const t2 = await sbx.pty.create({ cols: 40, rows: 10, onData: () => {} })
  await sbx.pty.sendInput(t2.pid, enc('exit\n'))
  const r2 = await t2.wait()
  assert.equal(r2.exitCode, 0, `exit in a terminal: ${JSON.stringify(r2)}`)
})
