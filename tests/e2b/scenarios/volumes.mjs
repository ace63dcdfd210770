// Needs envd: E2B's volumes on Airlock's (docs/volumes.md). Volume.create,
// list, getInfo; Sandbox.create with volumeMounts (a Volume and a name);
// what is written there outlives the sandbox; a second read-write holder
// and the destroy of a held volume are refused; destroy once free, then it
// is gone (destroy says false, getInfo rejects). Each error next to the
// call that succeeds.
import assert from 'node:assert/strict'
import { Sandbox, SandboxError, Volume, VolumeError } from 'e2b'
import { scenario, step, rejects, runTag } from './lib.mjs'

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
  const b = await Sandbox.create({ volumeMounts: { '/data': name } })
  cleanups.push(b)
  assert.equal(await b.files.read('/data/note.txt'), text, 'the next sandbox reads what the first wrote')
  await b.kill()
  cleanups.pop()

  assert.equal(await Volume.destroy(vol.volumeId), true, 'destroyed once free')
  assert.equal(await Volume.destroy(vol.volumeId), false, 'gone: destroy says false')
  assert.ok(!(await Volume.list()).some((v) => v.volumeId === vol.volumeId), 'no longer listed')
})
