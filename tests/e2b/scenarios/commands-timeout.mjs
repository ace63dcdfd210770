// Needs envd: commands.run's timeoutMs. A command that runs past it rejects
// with TimeoutError at the deadline, and the process is gone afterwards
// (reference envd kills it when the deadline expires); a command that ends
// in time succeeds with the same option.
import assert from 'node:assert/strict'
import { Sandbox, TimeoutError } from 'e2b'
import { scenario, step, result, rejects, sleep, until } from './lib.mjs'

await scenario('commands.run timeoutMs', async (cleanups) => {
  const sbx = await Sandbox.create()
  cleanups.push(sbx)
  step(`created ${sbx.sandboxId}`)

  // the control: in time
  const quick = await sbx.commands.run('sleep 1; echo in time', { timeoutMs: 20_000 })
  assert.equal(quick.stdout, 'in time\n')

  // past its deadline: a loop that appends to a file every 0.2 s
  const cmd = 'while true; do echo x >> /tmp/ticks; sleep 0.2; done'
  const t0 = Date.now()
  const err = await rejects(sbx.commands.run(cmd, { timeoutMs: 3000 }), TimeoutError, 'a command past its timeoutMs')
  const took = Date.now() - t0
  step(`rejected after ${took} ms: ${err.message.split(':')[0]}`)
  assert.ok(took >= 2900 && took < 10_000, `rejected after ${took} ms with timeoutMs 3000`)

  // gone: not listed, not running, the file no longer grows
  const gone = await until(async () => {
    const procs = await sbx.commands.list()
    return procs.some((p) => p.args?.includes(cmd)) ? null : procs
  }, 5000, 'the timed-out command gone from commands.list()')
  step(`commands.list() afterwards: ${JSON.stringify(gone)}`)
  const ps = await sbx.commands.run('ps -eo args', { user: 'root' })
  assert.ok(!ps.stdout.includes('/tmp/ticks'), `the loop still runs:\n${ps.stdout}`)
  const n1 = (await sbx.files.read('/tmp/ticks')).length
  await sleep(1500)
  const n2 = (await sbx.files.read('/tmp/ticks')).length
  assert.ok(n1 > 0, 'the loop never ran')
  assert.equal(n2, n1, `/tmp/ticks grew from ${n1} to ${n2} bytes after the timeout`)

  // a background command with timeoutMs: wait() rejects the same way
  const bg = await sbx.commands.run('sleep 600', { background: true, timeoutMs: 2000 })
  await rejects(bg.wait(), TimeoutError, 'wait() of a background command past its timeoutMs')
  await until(async () => !(await sbx.commands.list()).some((p) => p.pid === bg.pid), 5000,
    'the timed-out background command gone from commands.list()')
  result({ rejectedAfterMs: took })
})
