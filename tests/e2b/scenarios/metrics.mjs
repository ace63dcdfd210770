// getMetrics(): the guest's CPU, memory and disk use as E2B's SDK maps them,
// within what the sandbox has; a killed sandbox has none to give.
// Usage: metrics.mjs [TEMPLATE]
import assert from 'node:assert/strict'
import { Sandbox, SandboxNotFoundError } from 'e2b'
import { scenario, step, rejects } from './lib.mjs'

const template = process.argv[2]

await scenario('getMetrics', async (cleanups) => {
  const sbx = template === undefined ? await Sandbox.create() : await Sandbox.create(template)
  cleanups.push(sbx)
  step(`created ${sbx.sandboxId}`)
  const before = Math.floor(Date.now() / 1000)
  const m = await sbx.getMetrics()
  step(`metrics ${JSON.stringify(m)}`)
  assert.equal(m.length, 1, 'one sample: Airlock keeps no history')
  const s = m[0]
  assert.ok(s.timestamp instanceof Date && Math.abs(s.timestamp.getTime() / 1000 - before) < 60, `timestamp ${s.timestamp}`)
  assert.ok(s.cpuCount >= 1, `cpuCount ${s.cpuCount}`)
  assert.ok(s.cpuUsedPct >= 0 && s.cpuUsedPct <= 100, `cpuUsedPct ${s.cpuUsedPct}`)
  assert.ok(s.memTotal > 100 * 2 ** 20 && s.memUsed > 0 && s.memUsed <= s.memTotal, `memory ${s.memUsed}/${s.memTotal}`)
  assert.ok(s.diskTotal > 0 && s.diskUsed > 0 && s.diskUsed <= s.diskTotal, `disk ${s.diskUsed}/${s.diskTotal}`)
  // a window in the past has no sample
  const old = await sbx.getMetrics({ start: new Date(Date.now() - 3600_000), end: new Date(Date.now() - 1800_000) })
  assert.deepEqual(old, [], 'a window an hour ago')
  const id = sbx.sandboxId
  await sbx.kill()
  cleanups.pop()
  await rejects(Sandbox.getMetrics(id), SandboxNotFoundError, 'getMetrics of a killed sandbox')
})
