// setTimeout(ms) moves endAt to now + ms, later and earlier.
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { scenario, step, isDate, near } from './lib.mjs'

await scenario('setTimeout', async (cleanups) => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  cleanups.push(sbx)
  step(`created ${sbx.sandboxId}`)
  const first = await sbx.getInfo()
  isDate(first.endAt, 'endAt')

  for (const ms of [600_000, 90_000]) {
    const t = Date.now()
    await sbx.setTimeout(ms)
    const info = await sbx.getInfo()
    step(`setTimeout(${ms}): endAt ${info.endAt.toISOString()}`)
    isDate(info.endAt, 'endAt')
    near(info.endAt, t + ms, 5000 + (Date.now() - t), `endAt after setTimeout(${ms})`)
    assert.equal(info.startedAt.getTime(), first.startedAt.getTime(), 'setTimeout changed startedAt')
    assert.equal(info.state, 'running')
  }
  // the static form, on the same sandbox
  const t = Date.now()
  await Sandbox.setTimeout(sbx.sandboxId, 300_000)
  near((await sbx.getInfo()).endAt, t + 300_000, 5000 + (Date.now() - t), 'endAt after Sandbox.setTimeout(id, 300000)')
})
