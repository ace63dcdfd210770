// Needs envd: commands.connect(pid) to a command another handle is
// attached to streams what the command writes from then on, as reference
// envd's Connect does (it subscribes to the process's output): not again
// what it wrote before, which the first handle already has.
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { scenario, step, until } from './lib.mjs'

await scenario('connect streams from then on', async (cleanups) => {
  const sbx = await Sandbox.create()
  cleanups.push(sbx)
  step(`created ${sbx.sandboxId}`)
  const first = await sbx.commands.run('echo before; sleep 3; echo after', { background: true })
  await until(() => first.stdout === 'before\n', 10_000, `the first handle has "before" (${JSON.stringify(first.stdout)})`)
  const seen = []
  const second = await sbx.commands.connect(first.pid, { onStdout: (d) => { seen.push(d) } })
  const r2 = await second.wait()
  const r1 = await first.wait()
  step(`first handle: ${JSON.stringify(r1.stdout)}; second: ${JSON.stringify(r2.stdout)} (onStdout ${JSON.stringify(seen)})`)
  assert.equal(r1.stdout, 'before\nafter\n', 'the first handle')
  assert.equal(r2.stdout, 'after\n', 'the second handle got output from before its connect')
  assert.equal(seen.join(''), 'after\n')
})
