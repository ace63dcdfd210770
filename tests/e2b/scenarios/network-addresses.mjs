// allowOut/denyOut entries that are addresses (E2B: "CIDR blocks, IP
// addresses, or hostnames"): an allowlist of a host, an IP address and a
// CIDR block on create, a denyOut of an address on updateNetwork. The
// first request is the create, before any sandbox exists. The policies
// the test reads from /v1 (the sandbox in RESULT is left for it).
import { ALL_TRAFFIC, Sandbox } from 'e2b'
import { scenario, step, result } from './lib.mjs'

await scenario('network addresses', async (cleanups) => {
  const sbx = await Sandbox.create({ network: { denyOut: [ALL_TRAFFIC], allowOut: ['example.com', '1.1.1.1', '8.8.8.0/24'] } })
  cleanups.push(sbx)
  step(`allowlist of a host, an address and a block: ${sbx.sandboxId}`)
  const other = await Sandbox.create()
  cleanups.push(other)
  await other.updateNetwork({ denyOut: ['203.0.113.7'] })
  step(`updateNetwork of ${other.sandboxId}: denyOut 203.0.113.7`)
  result({ created: sbx.sandboxId, updated: other.sandboxId })
  cleanups.length = 0 // the test reads their policies, then kills them
})
