// Needs envd: sandbox.files. write/read of text and of bytes (every byte
// value), read as 'bytes', 'blob' and 'stream'; a multi-file write; list
// with depth 1 and 2; exists; getInfo; makeDir; rename; remove; and the
// errors each documents (FileNotFoundError for what is not there, false
// where the SDK says so), each next to the call that succeeds.
import assert from 'node:assert/strict'
import { FileNotFoundError, FileType, InvalidArgumentError, Sandbox, SandboxError } from 'e2b'
import { scenario, step, rejects, runTag } from './lib.mjs'

const names = (entries) => entries.map((e) => e.path).sort()

await scenario('files', async (cleanups) => {
  const sbx = await Sandbox.create()
  cleanups.push(sbx)
  step(`created ${sbx.sandboxId}`)
  const d = `/tmp/files-${process.pid}`

  // text
  const text = `hello ${runTag}\nsecond line ünïcødé\n`
  const w = await sbx.files.write(`${d}/text.txt`, text)
  step(`write: ${JSON.stringify(w)}`)
  assert.deepEqual({ name: w.name, path: w.path }, { name: 'text.txt', path: `${d}/text.txt` }, 'WriteInfo')
  assert.ok(!Array.isArray(w), 'a single write gives one WriteInfo')
  assert.equal(await sbx.files.read(`${d}/text.txt`), text, 'read back as text')
  const cat = await sbx.commands.run(`cat ${d}/text.txt`)
  assert.equal(cat.stdout, text, 'the file as a command sees it')
  // overwrite
  await sbx.files.write(`${d}/text.txt`, 'replaced\n')
  assert.equal(await sbx.files.read(`${d}/text.txt`), 'replaced\n', 'an overwrite')
  // empty
  await sbx.files.write(`${d}/empty`, '')
  assert.equal(await sbx.files.read(`${d}/empty`), '', 'an empty file as text')
  assert.equal((await sbx.files.read(`${d}/empty`, { format: 'bytes' })).length, 0, 'an empty file as bytes')

  // binary: all 256 byte values, twice over, from a Uint8Array and an ArrayBuffer
  const all = new Uint8Array(512)
  for (let i = 0; i < all.length; i++) all[i] = i % 256
  await sbx.files.write(`${d}/bin`, all)
  const bytes = await sbx.files.read(`${d}/bin`, { format: 'bytes' })
  assert.ok(bytes instanceof Uint8Array, `format 'bytes' gives ${bytes?.constructor?.name}`)
  assert.ok(Buffer.from(bytes).equals(Buffer.from(all)), 'the bytes read back differ from those written')
  const sum = await sbx.commands.run(`od -An -tu1 -v ${d}/bin | wc -w; cmp <(head -c 256 ${d}/bin) <(tail -c 256 ${d}/bin) && echo same`)
  assert.equal(sum.stdout, '512\nsame\n', `the file in the sandbox: ${JSON.stringify(sum)}`)
  await sbx.files.write(`${d}/bin2`, all.buffer.slice(0, 256))
  assert.ok(Buffer.from(await sbx.files.read(`${d}/bin2`, { format: 'bytes' })).equals(Buffer.from(all.subarray(0, 256))),
    'written from an ArrayBuffer')
  const blob = await sbx.files.read(`${d}/bin`, { format: 'blob' })
  assert.ok(blob instanceof Blob, `format 'blob' gives ${blob?.constructor?.name}`)
  assert.ok(Buffer.from(await blob.arrayBuffer()).equals(Buffer.from(all)), 'the blob differs')
  const stream = await sbx.files.read(`${d}/bin`, { format: 'stream' })
  const chunks = []
  for await (const c of stream) chunks.push(c)
  assert.ok(Buffer.concat(chunks).equals(Buffer.from(all)), "format 'stream' differs")
  await sbx.files.write(`${d}/from-blob`, new Blob(['a blob\n']))
  assert.equal(await sbx.files.read(`${d}/from-blob`), 'a blob\n', 'written from a Blob')

  // several files in one write, in directories that do not exist yet
  const multi = await sbx.files.write([
    { path: `${d}/tree/first.txt`, data: 'first file\n' },
    { path: `${d}/tree/sub/second.txt`, data: 'second file\n' },
    { path: `${d}/tree/sub/deeper/third.bin`, data: all.slice(0, 100) },
  ])
  step(`multi-file write: ${JSON.stringify(multi)}`)
  assert.ok(Array.isArray(multi), 'a multi-file write gives a list')
  assert.deepEqual(multi.map((x) => x.path),
    [`${d}/tree/first.txt`, `${d}/tree/sub/second.txt`, `${d}/tree/sub/deeper/third.bin`], 'one WriteInfo per file, in order')
  assert.equal(await sbx.files.read(`${d}/tree/sub/second.txt`), 'second file\n')
  assert.equal((await sbx.files.read(`${d}/tree/sub/deeper/third.bin`, { format: 'bytes' })).length, 100)

  // list
  const l1 = await sbx.files.list(`${d}/tree`)
  step(`list depth 1: ${JSON.stringify(l1.map((e) => [e.name, e.type, e.path]))}`)
  assert.deepEqual(names(l1), [`${d}/tree/first.txt`, `${d}/tree/sub`], 'depth 1')
  const first = l1.find((e) => e.name === 'first.txt')
  assert.equal(first.type, FileType.FILE)
  assert.equal(first.size, 11)
  assert.equal(l1.find((e) => e.name === 'sub').type, FileType.DIR)
  const l2 = await sbx.files.list(`${d}/tree`, { depth: 2 })
  step(`list depth 2: ${JSON.stringify(l2.map((e) => [e.name, e.type, e.path]))}`)
  assert.deepEqual(names(l2),
    [`${d}/tree/first.txt`, `${d}/tree/sub`, `${d}/tree/sub/deeper`, `${d}/tree/sub/second.txt`], 'depth 2')
  assert.equal(l2.find((e) => e.path === `${d}/tree/sub/deeper`).type, FileType.DIR)
  assert.equal(l2.find((e) => e.path === `${d}/tree/sub/second.txt`).name, 'second.txt', 'an entry\'s name is its own')
  await rejects(sbx.files.list(`${d}/tree`, { depth: 0 }), InvalidArgumentError, 'list with depth 0 (the SDK refuses)')
  await rejects(sbx.files.list(`${d}/no-such-dir`), FileNotFoundError, 'list of a directory that does not exist')
  // a symlink is listed as one
  await sbx.commands.run(`ln -s first.txt ${d}/tree/link`)
  const link = (await sbx.files.list(`${d}/tree`)).find((e) => e.name === 'link')
  assert.equal(link?.type, FileType.SYMLINK, `a symlink: ${JSON.stringify(link)}`)

  // exists
  assert.equal(await sbx.files.exists(`${d}/tree/first.txt`), true, 'exists of a file')
  assert.equal(await sbx.files.exists(`${d}/tree/sub`), true, 'exists of a directory')
  assert.equal(await sbx.files.exists(`${d}/tree/nope`), false, 'exists of nothing')

  // getInfo
  const info = await sbx.files.getInfo(`${d}/tree/first.txt`)
  step(`getInfo: ${JSON.stringify(info)}`)
  assert.equal(info.name, 'first.txt')
  assert.equal(info.path, `${d}/tree/first.txt`)
  assert.equal(info.type, FileType.FILE)
  assert.equal(info.size, 11)
  assert.equal(info.permissions, '-rw-r--r--')
  assert.equal(info.mode & 0o777, 0o644, `mode ${info.mode}`)
  assert.equal(info.owner, 'root')
  assert.equal(info.group, 'root')
  assert.ok(info.modifiedTime instanceof Date && Math.abs(info.modifiedTime.getTime() - Date.now()) < 120_000,
    `modifiedTime ${info.modifiedTime}`)
  await sbx.commands.run(`chmod 750 ${d}/tree/sub`)
  const dinfo = await sbx.files.getInfo(`${d}/tree/sub`)
  assert.equal(dinfo.type, FileType.DIR)
  assert.equal(dinfo.permissions, 'drwxr-x---')
  const linfo = await sbx.files.getInfo(`${d}/tree/link`)
  assert.equal(linfo.type, FileType.SYMLINK, `getInfo of a symlink: ${JSON.stringify(linfo)}`)
  assert.ok(['first.txt', `${d}/tree/first.txt`].includes(linfo.symlinkTarget), `symlinkTarget ${linfo.symlinkTarget}`)
  await rejects(sbx.files.getInfo(`${d}/tree/nope`), FileNotFoundError, 'getInfo of nothing')

  // makeDir: true, false when it is there, parents made
  assert.equal(await sbx.files.makeDir(`${d}/made/a/b`), true, 'makeDir of a new path')
  assert.equal(await sbx.files.makeDir(`${d}/made/a/b`), false, 'makeDir of an existing directory')
  assert.equal((await sbx.files.getInfo(`${d}/made/a`)).type, FileType.DIR, 'makeDir made the parents')

  // rename: the destination's entry
  const moved = await sbx.files.rename(`${d}/tree/first.txt`, `${d}/made/a/b/renamed.txt`)
  step(`rename: ${JSON.stringify(moved)}`)
  assert.equal(moved.path, `${d}/made/a/b/renamed.txt`)
  assert.equal(moved.name, 'renamed.txt')
  assert.equal(moved.type, FileType.FILE)
  assert.equal(moved.size, 11)
  assert.equal(await sbx.files.exists(`${d}/tree/first.txt`), false, 'the source after rename')
  assert.equal(await sbx.files.read(`${d}/made/a/b/renamed.txt`), 'first file\n')
  await rejects(sbx.files.rename(`${d}/tree/first.txt`, `${d}/elsewhere.txt`), FileNotFoundError,
    'rename of a source that is not there')
  const movedDir = await sbx.files.rename(`${d}/tree/sub`, `${d}/moved-sub`)
  assert.equal(movedDir.type, FileType.DIR, 'rename of a directory')
  assert.equal(await sbx.files.read(`${d}/moved-sub/second.txt`), 'second file\n')

  // remove: a file, a directory with what is in it
  await sbx.files.remove(`${d}/made/a/b/renamed.txt`)
  assert.equal(await sbx.files.exists(`${d}/made/a/b/renamed.txt`), false, 'exists after remove')
  await rejects(sbx.files.remove(`${d}/made/a/b/renamed.txt`), FileNotFoundError, 'remove of what is not there')
  await sbx.files.remove(`${d}/moved-sub`)
  assert.equal(await sbx.files.exists(`${d}/moved-sub`), false, 'a directory after remove')

  // read of what is not there, of a directory
  await rejects(sbx.files.read(`${d}/made/a/b/renamed.txt`), FileNotFoundError, 'read of a missing file')
  await rejects(sbx.files.read(`${d}/no/such/file`, { format: 'bytes' }), FileNotFoundError, "read as 'bytes' of a missing file")
  const isDir = await rejects(sbx.files.read(`${d}/made`), SandboxError, 'read of a directory')
  assert.ok(isDir instanceof InvalidArgumentError, `read of a directory: InvalidArgumentError (envd's 400), got ${isDir.constructor.name}`)
  // and the file that is there still reads
  assert.equal(await sbx.files.read(`${d}/text.txt`), 'replaced\n')
})
