// Sandbox.create's network options and sandbox.updateNetwork: an allowlist
// (denyOut all traffic, allowOut example.com), allowInternetAccess: false,
// and an update that replaces the policy are accepted; options Airlock does
// not support (rules with a transform, egressProxy) reject with an error
// naming the option, on create and on update, and change nothing;
// getInfo() reports each policy as network {allowOut, denyOut}. The
// policies themselves the test reads from /v1 (the sandboxes in RESULT are
// left running for it; the test kills them).
import assert from 'node:assert/strict'
import { ALL_TRAFFIC, Sandbox, SandboxError, SandboxNotFoundError } from 'e2b'
import { scenario, step, result, rejects, runTag } from './lib.mjs'

await scenario('network', async (cleanups) => {
  const metadata = { suite: runTag }
  const allow = await Sandbox.create({ metadata, network: { denyOut: [ALL_TRAFFIC], allowOut: ['example.com'] } })
  cleanups.push(allow)
  step(`allowlist: ${allow.sandboxId}`)
  const deny = await Sandbox.create({ metadata, allowInternetAccess: false })
  cleanups.push(deny)
  step(`allowInternetAccess false: ${deny.sandboxId}`)
  const updated = await Sandbox.create({ metadata, network: { denyOut: [ALL_TRAFFIC], allowOut: ['example.com'] } })
  cleanups.push(updated)
  // the SDK's selector callback form is the same policy
  const viaCallback = await Sandbox.create({ metadata, network: { denyOut: ({ allTraffic }) => [allTraffic], allowOut: ['example.com'] } })
  cleanups.push(viaCallback)

  // unsupported: refused with the option's name, nothing made
  const before = (await Sandbox.list({ query: { metadata } }).nextItems()).length
  const rules = await rejects(Sandbox.create({ metadata, network: {
    denyOut: [ALL_TRAFFIC], allowOut: ['example.com'],
    rules: { 'example.com': [{ transform: { headers: { 'X-Injected': 'secret' } } }] },
  } }), SandboxError, 'network.rules with a transform')
  assert.match(rules.message, /rules/, 'the error names network.rules')
  const proxy = await rejects(Sandbox.create({ metadata, network: { egressProxy: { address: 'proxy.example.com:1080' } } }),
    SandboxError, 'network.egressProxy')
  assert.match(proxy.message, /egressProxy/, 'the error names network.egressProxy')
  assert.equal((await Sandbox.list({ query: { metadata } }).nextItems()).length, before, 'a refused create made a sandbox')

  // updateNetwork replaces the policy (checked from /v1 by the test);
  // an unsupported update is refused and leaves it
  await updated.updateNetwork({ denyOut: [ALL_TRAFFIC], allowOut: ['pypi.org'] })
  step(`updateNetwork of ${updated.sandboxId}: allowOut pypi.org`)
  const badUpdate = await rejects(updated.updateNetwork({ denyOut: [ALL_TRAFFIC], allowOut: ['github.com'],
    rules: { 'github.com': [{ transform: { headers: { 'X-Injected': 'secret' } } }] } }), SandboxError,
    'updateNetwork with rules')
  assert.match(badUpdate.message, /rules/, 'the error names network.rules')
  await rejects(Sandbox.updateNetwork('nosuchsandbox0', { allowInternetAccess: false }), SandboxNotFoundError,
    'Sandbox.updateNetwork of an unknown id')
  // getInfo() reports each policy in E2B's terms
  const infos = await Promise.all([allow, deny, updated].map((s) => Sandbox.getInfo(s.sandboxId)))
  const lists = ({ network }) => network && Object.fromEntries(['allowOut', 'denyOut'].filter((k) => network[k]).map((k) => [k, network[k]]))
  assert.deepEqual(lists(infos[0]), { allowOut: ['example.com'], denyOut: [ALL_TRAFFIC] }, 'getInfo().network of the allowlist')
  assert.equal(infos[0].allowInternetAccess, true)
  assert.deepEqual(lists(infos[1]), { denyOut: [ALL_TRAFFIC] }, 'getInfo().network of allowInternetAccess false')
  assert.equal(infos[1].allowInternetAccess, false)
  assert.deepEqual(lists(infos[2]), { allowOut: ['pypi.org'], denyOut: [ALL_TRAFFIC] }, 'getInfo().network after updateNetwork')
  result({ allowlist: allow.sandboxId, denyAll: deny.sandboxId, updated: updated.sandboxId, callback: viaCallback.sandboxId })
  cleanups.length = 0 // the test reads their policies, then kills them
})
