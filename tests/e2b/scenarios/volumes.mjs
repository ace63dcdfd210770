// Needs envd: E2B's volumes on Airlock's (docs/volumes.md). Volume.create,
// list, getInfo; Sandbox.create with volumeMounts (a Volume and a name);
// what is written there outlives the sandbox; a second read-write holder
// and the destroy of a held volume are refused; destroy once free, then it
// is gone (destroy says false, not listed). Each error next to the
// call that succeeds. A lifetime ending in a pause (E2B's autoPause) suspends
// the sandbox, its volume left in the node's store and still held, and a
// connect wakes it with the volume mounted again.
import assert from 'node:assert/strict'
import { Sandbox, SandboxError, Volume, VolumeError } from 'e2b'
import { scenario, step, rejects, runTag, until } from './lib.mjs'

await scenario('volumes', async (cleanups) => {
  const name = `ws-${process.pid}`
  const vol = await Volume.create(name)
  step(`volume ${vol.volumeId} (${vol.name})`)
  assert.equal(vol.name, name, 'the name given')
  assert.ok((await Volume.list()).some((v) => v.volumeId === vol.volumeId && v.name === name), 'listed')
  assert.equal((await Volume.getInfo(vol.volumeId)).name, name, 'getInfo')

  const a = await Sandbox.create({ volumeMounts: { '/workspace': vol } })
  cleanups.push(a)
  step(`created ${a.sandboxId} with the volume at /workspace`)
  const text = `kept ${runTag}\n`
  await a.files.write('/workspace/note.txt', text)
  const mounts = await a.commands.run('grep " /workspace " /proc/mounts')
  assert.match(mounts.stdout, /ext4/, 'an ext4 file system at /workspace')
  assert.deepEqual((await a.getInfo()).volumeMounts, [{ name, path: '/workspace' }], 'getInfo names the mount')

  // read-write to one sandbox at a time; a held volume is not destroyed
  await rejects(Sandbox.create({ volumeMounts: { '/w': name } }), SandboxError, 'a second read-write holder')
  await rejects(Volume.destroy(vol.volumeId), VolumeError, 'destroy while held')

  await a.kill()
  cleanups.pop()
  // a lifetime that ends in a pause: suspended with its memory, and back
  // on connect with the volume mounted (what it wrote there kept)
  const b = await Sandbox.create({ volumeMounts: { '/data': name }, timeoutMs: 5000, lifecycle: { onTimeout: 'pause' } })
  cleanups.push(b)
  assert.equal(await b.files.read('/data/note.txt'), text, 'the next sandbox reads what the first wrote')
  await b.files.write('/tmp/in-memory', 'kept\n')
  await b.files.write('/data/before-pause', 'on the volume\n')
  await until(async () => (await b.getInfo()).state === 'paused', 60_000, 'paused at its timeout', 500)
  const back = await Sandbox.connect(b.sandboxId, { timeoutMs: 300_000 })
  assert.equal((await back.getInfo()).state, 'running', 'running again')
  assert.equal(await back.files.read('/tmp/in-memory'), 'kept\n', 'a file written before the pause')
  assert.equal(await back.files.read('/data/note.txt'), text, 'the volume still there')
  const disk = await back.commands.run('echo 3 > /proc/sys/vm/drop_caches && cat /data/before-pause', { user: 'root' })
  assert.equal(disk.stdout, 'on the volume\n', 'what it wrote there, read from the disk')
  await b.kill()
  cleanups.pop()

  assert.equal(await Volume.destroy(vol.volumeId), true, 'destroyed once free')
  assert.equal(await Volume.destroy(vol.volumeId), false, 'gone: destroy says false')
  assert.ok(!(await Volume.list()).some((v) => v.volumeId === vol.volumeId), 'no longer listed')
})
