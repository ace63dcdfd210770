// Needs envd: commands.run's timeoutMs. A command that runs past it rejects
// with TimeoutError at the deadline, and the process is gone afterwards
// (reference envd kills it when the deadline expires); a command that ends
// in time succeeds with the same option. That the process no longer runs is
// also shown by its output file, which stops growing: for twice the time it
// was seen to take for a few ticks while it ran.
import assert from 'node:assert/strict'
import { FileNotFoundError, Sandbox, TimeoutError } from 'e2b'
import { scenario, step, result, rejects, sleep, until } from './lib.mjs'

await scenario('commands.run timeoutMs', async (cleanups) => {
  const sbx = await Sandbox.create()
  cleanups.push(sbx)
  step(`created ${sbx.sandboxId}`)

  // the control: in time
  const quick = await sbx.commands.run('sleep 1; echo in time', { timeoutMs: 20_000 })
  assert.equal(quick.stdout, 'in time\n')

  // past its deadline: a loop that appends a tick ("x\n") to a file every 0.2 s
  const cmd = 'while true; do echo x >> /tmp/ticks; sleep 0.2; done'
  const ticks = async () => {
    try {
      return (await sbx.files.read('/tmp/ticks')).length / 2
    } catch (err) {
      if (err instanceof FileNotFoundError) return 0
      throw err
    }
  }
  const t0 = Date.now()
  const running = rejects(sbx.commands.run(cmd, { timeoutMs: 5000 }), TimeoutError, 'a command past its timeoutMs')
    .then((e) => ({ err: e, at: Date.now() }))
  running.catch(() => {}) // awaited below: its failure is reported there
  // its own rate while it runs: how long a few more ticks take
  const first = await until(ticks, 2500, 'the loop\'s first tick')
  const tFirst = Date.now()
  const grown = await until(async () => ((await ticks()) >= first + 3 ? Date.now() : 0), 2500,
    'three more ticks of the loop while it runs')
  const tickMs = grown - tFirst
  step(`while it ran: ${first} tick(s), then 3 more in ${tickMs} ms`)
  const { err, at } = await running
  const took = at - t0
  step(`rejected after ${took} ms: ${err.message.split(':')[0]}`)
  assert.ok(took >= 4900 && took < 12_000, `rejected after ${took} ms with timeoutMs 5000`)

  // gone: not listed, not running, the file no longer grows
  const gone = await until(async () => {
    const procs = await sbx.commands.list()
    return procs.some((p) => p.args?.includes(cmd)) ? null : procs
  }, 5000, 'the timed-out command gone from commands.list()')
  step(`commands.list() afterwards: ${JSON.stringify(gone)}`)
  const ps = await sbx.commands.run('ps -eo args', { user: 'root' })
  assert.ok(!ps.stdout.includes('/tmp/ticks'), `the loop still runs:\n${ps.stdout}`)
  const n1 = await ticks()
  await sleep(2 * tickMs) // time enough for 6 ticks of a loop that still ran
  const n2 = await ticks()
  assert.equal(n2, n1, `/tmp/ticks grew from ${n1} to ${n2} ticks in ${2 * tickMs} ms after the timeout`)

  // a background command with timeoutMs: wait() rejects the same way
  const bg = await sbx.commands.run('sleep 600', { background: true, timeoutMs: 2000 })
  await rejects(bg.wait(), TimeoutError, 'wait() of a background command past its timeoutMs')
  await until(async () => !(await sbx.commands.list()).some((p) => p.pid === bg.pid), 5000,
    'the timed-out background command gone from commands.list()')
  result({ rejectedAfterMs: took })
})
