// Snapshots: sandbox.createSnapshot({name}) and Sandbox.createSnapshot(id)
// (Airlock's images) give a snapshotId that Sandbox.create() takes, by id or
// by name, after the sandbox is gone: files and a running process as they
// were, a sandbox of its own. Sandbox.listSnapshots() (all, one sandbox's,
// paged) and deleteSnapshot() (true, then false); a deleted snapshot makes
// nothing; a killed sandbox's createSnapshot is SandboxNotFoundError.
import assert from 'node:assert/strict'
import { Sandbox, SandboxError, SandboxNotFoundError } from 'e2b'
import { scenario, step, result, rejects, runTag } from './lib.mjs'

const snapshotCleanup = (id) => ({ sandboxId: id, kill: async () => { await Sandbox.deleteSnapshot(id) } })

await scenario('snapshots', async (cleanups) => {
  const sbx = await Sandbox.create()
  cleanups.push(sbx)
  step(`created ${sbx.sandboxId}`)
  await sbx.files.write('/root/snap.txt', `before ${runTag}\n`)
  const sleeper = await sbx.commands.run('sleep 100000', { background: true })
  step(`a process runs: pid ${sleeper.pid}`)

  const name = `snap-${process.pid}`
  let t = Date.now()
  const named = await sbx.createSnapshot({ name })
  step(`createSnapshot({name}) in ${Date.now() - t} ms: ${JSON.stringify(named)}`)
  cleanups.push(snapshotCleanup(named.snapshotId))
  assert.deepEqual(named.names, [name])
  const anonymous = await Sandbox.createSnapshot(sbx.sandboxId)
  cleanups.push(snapshotCleanup(anonymous.snapshotId))
  assert.deepEqual(anonymous.names, [])
  assert.notEqual(anonymous.snapshotId, named.snapshotId)
  // the sandbox runs on after each
  assert.equal(await sbx.isRunning(), true)
  await sbx.files.write('/root/snap.txt', 'after\n')
  await rejects(sbx.createSnapshot({ name }), SandboxError, 'a second snapshot of the same name')

  // listed: all, this sandbox's, and page by page
  const all = await Sandbox.listSnapshots().nextItems()
  const ids = all.map((s) => s.snapshotId)
  assert.ok(ids.includes(named.snapshotId) && ids.includes(anonymous.snapshotId), `listed: ${JSON.stringify(all)}`)
  const mine = await sbx.listSnapshots().nextItems()
  assert.deepEqual(mine.map((s) => s.snapshotId).sort(), [named.snapshotId, anonymous.snapshotId].sort())
  assert.deepEqual(mine.find((s) => s.snapshotId === named.snapshotId).names, [name])
  const pager = Sandbox.listSnapshots({ sandboxId: sbx.sandboxId, limit: 1 })
  const first = await pager.nextItems()
  assert.equal(first.length, 1)
  assert.equal(pager.hasNext, true, 'a second page')
  const second = await pager.nextItems()
  assert.equal(second.length, 1)
  assert.notEqual(second[0].snapshotId, first[0].snapshotId)
  assert.equal(pager.hasNext, false, 'no third page')
  assert.deepEqual(await Sandbox.listSnapshots({ sandboxId: 'nosuchsandbox0' }).nextItems(), [])

  // the sandbox goes; its snapshots make new ones, by id and by name
  assert.equal(await sbx.kill(), true)
  await rejects(Sandbox.createSnapshot(sbx.sandboxId), SandboxNotFoundError, 'createSnapshot of a killed sandbox')
  t = Date.now()
  const fromId = await Sandbox.create(named.snapshotId)
  step(`Sandbox.create(snapshotId) in ${Date.now() - t} ms: ${fromId.sandboxId}`)
  cleanups.push(fromId)
  const fromName = await Sandbox.create(name)
  cleanups.push(fromName)
  for (const made of [fromId, fromName]) {
    assert.notEqual(made.sandboxId, sbx.sandboxId)
    assert.equal(await made.files.read('/root/snap.txt'), `before ${runTag}\n`, `${made.sandboxId}: the file`)
    const alive = await made.commands.run(`kill -0 ${sleeper.pid} && echo alive`)
    assert.equal(alive.stdout, 'alive\n', `${made.sandboxId}: the process`)
    assert.equal((await made.commands.run('hostname')).stdout.trim(), made.sandboxId)
  }
  await fromId.files.write('/root/snap.txt', 'mine\n')
  assert.equal(await fromName.files.read('/root/snap.txt'), `before ${runTag}\n`, 'sandboxes of one snapshot share nothing')

  // deleted: gone, and makes nothing
  assert.equal(await Sandbox.deleteSnapshot(named.snapshotId), true)
  assert.equal(await Sandbox.deleteSnapshot(named.snapshotId), false)
  const err = await rejects(Sandbox.create(named.snapshotId), SandboxError, 'Sandbox.create of a deleted snapshot')
  assert.equal(err.statusCode, 404)
  const left = (await Sandbox.listSnapshots().nextItems()).map((s) => s.snapshotId)
  assert.ok(!left.includes(named.snapshotId) && left.includes(anonymous.snapshotId), `listed after delete: ${left}`)
  cleanups.splice(cleanups.findIndex((c) => c.sandboxId === named.snapshotId), 1)
  result({ named, anonymous })
})
