// The first use of @e2b/code-interpreter on a node whose code-interpreter
// template is still being built in the background: Sandbox.create() with
// the SDK's defaults (its requests time out at 60 s) must answer before
// that, either with a sandbox or with ServiceBusyError saying the template
// is being built and how far it got; the caller retries, as that error
// asks, until it gets its sandbox; runCode then gives 42. Three creates at
// once meet the same build. RESULT: every attempt (ok, ms, error).
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'
import { ServiceBusyError } from 'e2b'
import { scenario, step, result, describe } from './lib.mjs'

const GIVE_UP_MS = 20 * 60 * 1000

await scenario('code interpreter, first use', async (cleanups) => {
  const attempts = []
  const t0 = Date.now()
  /** One Sandbox.create() with the SDK's defaults; the sandbox or null. */
  async function attempt() {
    const start = Date.now()
    try {
      const sbx = await Sandbox.create()
      cleanups.push(sbx)
      attempts.push({ ok: true, ms: Date.now() - start, at_ms: start - t0 })
      return sbx
    } catch (err) {
      attempts.push({ ok: false, ms: Date.now() - start, at_ms: start - t0, error: describe(err) })
      // anything but "busy, retry" (a TimeoutError above all) fails here
      assert.ok(err instanceof ServiceBusyError, `create: ${describe(err)}`)
      assert.match(err.message, /template code-interpreter is still being built \(.*\d+ s so far\): the build goes on/)
      return null
    }
  }
  // three at once: each answered, one build behind them all
  let sbx = (await Promise.all([attempt(), attempt(), attempt()])).find((s) => s) ?? null
  for (const a of attempts) step(`create: ${a.ok ? 'ok' : a.error} after ${a.ms} ms`)
  while (!sbx) {
    assert.ok(Date.now() - t0 < GIVE_UP_MS, 'the template was never ready')
    await new Promise((r) => setTimeout(r, 5000))
    sbx = await attempt()
    const a = attempts[attempts.length - 1]
    step(`create: ${a.ok ? 'ok' : a.error} after ${a.ms} ms`)
  }
  const ex = await sbx.runCode('6*7')
  assert.equal(ex.text, '42', JSON.stringify(ex))
  step(`runCode: ${ex.text}`)
  result({ attempts, total_ms: Date.now() - t0 })
})
