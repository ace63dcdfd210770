// Needs envd (GET /health through E2B_SANDBOX_URL, which isRunning() asks,
// not the control API): true while it runs, false once killed.
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { scenario, step } from './lib.mjs'

await scenario('isRunning', async (cleanups) => {
  const sbx = await Sandbox.create()
  cleanups.push(sbx)
  step(`created ${sbx.sandboxId}`)
  assert.equal(await sbx.isRunning(), true, 'isRunning() of a running sandbox')
  assert.equal(await sbx.kill(), true)
  assert.equal(await sbx.isRunning(), false, 'isRunning() after kill')
})
