// Needs envd: with a tenant's API key (E2B_API_KEY) the SDK sees its own
// tenant's sandboxes and snapshots only. Another tenant's sandbox (argv[2])
// and snapshot (argv[3]) answer as ids that do not exist: getInfo,
// connect, setTimeout, pause and createSnapshot reject with
// SandboxNotFoundError, kill and deleteSnapshot give false, list and
// listSnapshots leave them out, Sandbox.create(snapshot) is a 404; this
// sandbox's envd token opens nothing of the other's. The controls: the same
// calls on its own sandbox and snapshot succeed.
import assert from 'node:assert/strict'
import { Sandbox, SandboxError, SandboxNotFoundError } from 'e2b'
import { scenario, step, result, rejects, runTag } from './lib.mjs'

const [otherSandbox, otherSnapshot] = process.argv.slice(2)

await scenario('tenants', async (cleanups) => {
  const sbx = await Sandbox.create({ metadata: { suite: runTag } })
  cleanups.push(sbx)
  step(`created ${sbx.sandboxId} with the tenant's key`)
  const own = await sbx.createSnapshot()
  cleanups.push({ sandboxId: own.snapshotId, kill: async () => { await Sandbox.deleteSnapshot(own.snapshotId) } })

  // the controls
  assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'running')
  await Sandbox.setTimeout(sbx.sandboxId, 600_000)
  assert.deepEqual((await Sandbox.list().nextItems()).map((s) => s.sandboxId), [sbx.sandboxId])
  assert.deepEqual((await Sandbox.listSnapshots().nextItems()).map((s) => s.snapshotId), [own.snapshotId])
  assert.equal((await sbx.commands.run('echo mine')).stdout, 'mine\n')

  // the other tenant's sandbox and snapshot do not exist for this key
  for (const [what, call] of [
    ['getInfo', () => Sandbox.getInfo(otherSandbox)],
    ['connect', () => Sandbox.connect(otherSandbox)],
    ['setTimeout', () => Sandbox.setTimeout(otherSandbox, 1000)],
    ['pause', () => Sandbox.pause(otherSandbox)],
    ['createSnapshot', () => Sandbox.createSnapshot(otherSandbox)],
  ]) await rejects(call(), SandboxNotFoundError, `${what} of another tenant's sandbox`)
  assert.equal(await Sandbox.kill(otherSandbox), false, "kill of another tenant's sandbox")
  assert.equal(await Sandbox.deleteSnapshot(otherSnapshot), false, "deleteSnapshot of another tenant's snapshot")
  const err = await rejects(Sandbox.create(otherSnapshot), SandboxError, "Sandbox.create of another tenant's snapshot")
  assert.equal(err.statusCode, 404)
  assert.deepEqual((await Sandbox.listSnapshots({ sandboxId: otherSandbox }).nextItems()), [])

  // envd: this sandbox's token opens this sandbox only
  const stat = (id) => fetch(`${process.env.E2B_SANDBOX_URL}/filesystem.Filesystem/Stat`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'Connect-Protocol-Version': '1', 'E2b-Sandbox-Id': id,
               'X-Access-Token': sbx.envdAccessToken, Authorization: `Basic ${Buffer.from('root:').toString('base64')}` },
    body: JSON.stringify({ path: '/etc/hostname' }),
  })
  const mine = await stat(sbx.sandboxId)
  assert.equal(mine.status, 200, `Stat of its own sandbox: ${mine.status} ${await mine.text()}`)
  const theirs = await stat(otherSandbox)
  const body = await theirs.text()
  assert.equal(theirs.status, 401, `Stat of another's sandbox with this token: ${theirs.status} ${body}`)
  assert.ok(!body.includes('hostname'), body)
  result({ sandbox: sbx.sandboxId, snapshot: own.snapshotId })
})
