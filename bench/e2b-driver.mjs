// bench/e2b.py's client, one Node.js process for both paths so that both
// pay the same client costs (the SDK's first call in a process spends ~1 s
// setting itself up: a warm-up round of each comes first, not counted).
// The SDK is configured by E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY
// only; /v1 is plain fetch with AIRLOCK_TOKEN. Prints one JSON line.
//   e2b-driver.mjs create TEMPLATE N   N rounds of each, interleaved:
//       SDK: Sandbox.create() + commands.run('true'), kill
//       /v1: POST /v1/sandboxes + POST exec of bash -l -c true (what the
//            SDK has envd run), DELETE
//   e2b-driver.mjs rtt TEMPLATE N      N round trips of each on one sandbox
import { Sandbox } from 'e2b'

const [mode, template, n] = process.argv.slice(2)
const url = process.env.E2B_API_URL
const auth = { Authorization: `Bearer ${process.env.AIRLOCK_TOKEN}`, 'Content-Type': 'application/json' }
const cmd = ['/bin/bash', '-l', '-c', 'true']
const now = () => Number(process.hrtime.bigint()) / 1e6

async function v1(method, path, body) {
  const r = await fetch(url + path, { method, headers: auth, body: body && JSON.stringify(body) })
  const text = await r.text()
  if (r.status >= 300) throw new Error(`${method} ${path}: ${r.status} ${text}`)
  return text ? JSON.parse(text) : null
}

async function sdkRound() {
  const t0 = now()
  const sbx = await Sandbox.create(template)
  const t1 = now()
  await sbx.commands.run('true')
  const t2 = now()
  await sbx.kill()
  return { create_ms: t1 - t0, first_run_ms: t2 - t1, total_ms: t2 - t0 }
}

async function nativeRound() {
  const t0 = now()
  const sbx = await v1('POST', '/v1/sandboxes', { template })
  const t1 = now()
  const r = await v1('POST', `/v1/sandboxes/${sbx.id}/exec`, { cmd })
  const t2 = now()
  if (r.exit_code !== 0) throw new Error(`exec: ${JSON.stringify(r)}`)
  await v1('DELETE', `/v1/sandboxes/${sbx.id}`)
  return { create_ms: t1 - t0, first_run_ms: t2 - t1, total_ms: t2 - t0 }
}

if (mode === 'create') {
  await nativeRound()
  await sdkRound()
  const native = [], sdk = []
  for (let i = 0; i < Number(n); i++) {
    native.push(await nativeRound())
    sdk.push(await sdkRound())
  }
  console.log(JSON.stringify({ native, sdk }))
} else if (mode === 'rtt') {
  const sbx = await Sandbox.create(template)
  await sbx.commands.run('true') // the first run pays for bash's pages
  await v1('POST', `/v1/sandboxes/${sbx.sandboxId}/exec`, { cmd })
  const native = [], sdk = []
  for (let i = 0; i < Number(n); i++) {
    let t = now()
    await v1('POST', `/v1/sandboxes/${sbx.sandboxId}/exec`, { cmd })
    native.push(now() - t)
    t = now()
    await sbx.commands.run('true')
    sdk.push(now() - t)
  }
  await sbx.kill()
  console.log(JSON.stringify({ native, sdk }))
} else {
  console.error('usage: e2b-driver.mjs create TEMPLATE N | rtt TEMPLATE N')
  process.exit(2)
}
