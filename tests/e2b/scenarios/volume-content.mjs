// Needs envd: E2B's volume content API (a Volume's files, with its token
// and no sandbox of the app's) on Airlock's volumes (docs/e2b.md). Set
// E2B_VOLUME_API_URL too (the SDK reaches it there, or at api.DOMAIN).
// While no sandbox holds the volume: writeFile, makeDir, list (depth),
// getInfo, exists, readFile (text and bytes), updateMetadata, remove, each
// error next to the call that succeeds. A sandbox that mounts the volume
// sees what was written, and while it holds it read-write the content API
// goes through it (what one writes the other reads). A symlink the sandbox
// makes to /etc/passwd is read in the volume (its own /etc/passwd), never
// the guest's; a token of another volume, or none, is refused.
import assert from 'node:assert/strict'
import { AuthenticationError, Sandbox, Volume, VolumeError, VolumePathNotFoundError } from 'e2b'
import { scenario, step, rejects, isDate, result } from './lib.mjs'

await scenario('volume-content', async (cleanups) => {
  const vol = await Volume.create(`vc-${process.pid}`)
  const other = await Volume.create(`vc-other-${process.pid}`)
  cleanups.push({ sandboxId: vol.volumeId, kill: () => Volume.destroy(vol.volumeId) })
  cleanups.push({ sandboxId: other.volumeId, kill: () => Volume.destroy(other.volumeId) })
  assert.match(vol.token, /^[0-9a-f]{64}$/, 'a token to reach its files with')
  assert.equal((await Volume.connect(vol.volumeId)).token, vol.token, 'connect gives the same token')
  step(`volume ${vol.volumeId}`)

  // nothing holds it: its files all the same
  const w = await vol.writeFile('/docs/a.txt', 'hello\n', { mode: 0o640 })
  assert.equal(w.name, 'a.txt')
  assert.equal(w.path, '/docs/a.txt')
  assert.equal(w.type, 'file')
  assert.equal(w.size, 6)
  assert.equal(w.mode & 0o777, 0o640, 'written with the mode asked for')
  isDate(w.mtime, 'mtime')
  isDate(w.atime, 'atime')
  isDate(w.ctime, 'ctime')
  step('written while nothing holds it')
  const d = await vol.makeDir('/docs/sub/deeper', { force: true })
  assert.equal(d.type, 'directory')
  await rejects(vol.makeDir('/docs/sub'), VolumeError, 'makeDir of a directory that exists, without force')
  await vol.writeFile('relative.txt', new Uint8Array([0, 1, 2, 255]))
  assert.deepEqual([...await vol.readFile('/relative.txt', { format: 'bytes' })], [0, 1, 2, 255],
    'a relative path is from the root; bytes come back as they went')
  assert.equal(await vol.readFile('/docs/a.txt'), 'hello\n')

  const top = (await vol.list('/docs')).map((e) => `${e.path}:${e.type}`).sort()
  assert.deepEqual(top, ['/docs/a.txt:file', '/docs/sub:directory'], 'one level')
  const deep = (await vol.list('/docs', { depth: 3 })).map((e) => e.path).sort()
  assert.deepEqual(deep, ['/docs/a.txt', '/docs/sub', '/docs/sub/deeper'], 'three levels')
  const info = await vol.getInfo('/docs/a.txt')
  assert.equal(info.size, 6)
  assert.equal(await vol.exists('/docs/a.txt'), true)
  assert.equal(await vol.exists('/docs/none'), false)
  await rejects(vol.getInfo('/docs/none'), VolumePathNotFoundError, 'getInfo of what is not there')
  await rejects(vol.readFile('/docs/none'), VolumePathNotFoundError, 'readFile of what is not there')

  const changed = await vol.updateMetadata('/docs/a.txt', { uid: 1234, gid: 4321, mode: 0o600 })
  assert.equal(changed.uid, 1234)
  assert.equal(changed.gid, 4321)
  assert.equal(changed.mode & 0o7777, 0o600)
  step('metadata changed')

  // a sandbox that mounts it sees all that; while it holds it, the
  // content API goes through it
  const s = await Sandbox.create({ volumeMounts: { '/w': vol } })
  cleanups.push(s)
  const seen = await s.commands.run('cat /w/docs/a.txt && stat -c "%u %g %a" /w/docs/a.txt', { user: 'root' })
  assert.equal(seen.stdout, 'hello\n1234 4321 600\n', 'the sandbox sees what the content API wrote')
  await s.commands.run('mkdir -p /w/etc && echo volume-passwd > /w/etc/passwd && ln -s /etc/passwd /w/link && ' +
    'ln -s ../../../.. /w/docs/sub/up && echo from-sandbox > /w/from-sandbox', { user: 'root' })
  assert.equal(await vol.readFile('/from-sandbox'), 'from-sandbox\n', 'read through the holder')
  await vol.writeFile('/from-api', 'from-api\n')
  assert.equal((await s.commands.run('cat /w/from-api')).stdout, 'from-api\n', 'written through the holder')

  // the attack: symlinks that point out of the volume, followed by the
  // guest; the volume's root is its "/", so they stay in it
  const link = (await vol.list('/')).find((e) => e.name === 'link')
  assert.equal(link.type, 'symlink', 'the link is there')
  assert.equal(link.target, '/etc/passwd', 'and points at /etc/passwd')
  assert.equal(await vol.readFile('/link'), 'volume-passwd\n', "the volume's /etc/passwd, not the guest's")
  const up = (await vol.list('/docs/sub/up')).map((e) => e.name).sort()
  assert.ok(up.includes('from-api') && up.includes('link') && !up.includes('proc'),
    `../../../.. from the volume's root is its root: ${up}`)
  const guests = await s.commands.run('head -c 5 /etc/passwd')
  assert.equal(guests.stdout, 'root:', "the guest's own /etc/passwd is another file (control)")
  await s.kill()
  cleanups.pop()

  // tokens: another volume's, and none, are refused
  const stranger = new Volume(vol.volumeId, vol.name, other.token)
  await rejects(stranger.readFile('/docs/a.txt'), AuthenticationError, "another volume's token")
  await rejects(new Volume(vol.volumeId, vol.name, '').list('/'), AuthenticationError, 'no token')
  assert.equal(await vol.readFile('/docs/a.txt'), 'hello\n', 'its own token still reads (control)')

  await vol.remove('/docs')
  assert.equal(await vol.exists('/docs'), false, 'removed with what was in it')
  await rejects(vol.remove('/docs'), VolumePathNotFoundError, 'remove of what is gone')
  // no helper sandbox outlives its requests
  const left = (await Sandbox.list().nextItems()).map((x) => x.sandboxId)
  result({ left })
})
