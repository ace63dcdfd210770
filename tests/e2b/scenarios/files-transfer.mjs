// Needs envd: the other ways files.write sends and files.read fetches:
// octet-stream uploads (useOctetStream, one request per file), a
// ReadableStream (streamed), gzip both ways, writeFiles.
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { scenario, step, runTag } from './lib.mjs'

await scenario('files transfer', async (cleanups) => {
  const sbx = await Sandbox.create()
  cleanups.push(sbx)
  step(`created ${sbx.sandboxId}`)
  const d = '/tmp/transfer'
  const enc = (s) => new TextEncoder().encode(s)
  // octet-stream, one file and several
  const one = await sbx.files.write(`${d}/octet.txt`, `octet ${runTag}\n`, { useOctetStream: true })
  assert.equal(one.path, `${d}/octet.txt`)
  assert.equal(await sbx.files.read(`${d}/octet.txt`), `octet ${runTag}\n`)
  const many = await sbx.files.write([{ path: `${d}/o1.txt`, data: 'first octet file\n' },
    { path: `${d}/o2.txt`, data: 'second octet file\n' }], { useOctetStream: true })
  assert.deepEqual(many.map((w) => w.path), [`${d}/o1.txt`, `${d}/o2.txt`])
  assert.equal(await sbx.files.read(`${d}/o2.txt`), 'second octet file\n')
  // a ReadableStream of several chunks, 1 MiB in all
  const chunk = 'x'.repeat(64 * 1024 - 1) + '\n'
  const stream = new ReadableStream({
    start(c) { for (let i = 0; i < 16; i++) c.enqueue(enc(chunk)); c.close() },
  })
  const streamed = await sbx.files.write(`${d}/streamed.txt`, stream)
  assert.equal(streamed.path, `${d}/streamed.txt`)
  const size = await sbx.commands.run(`wc -c < ${d}/streamed.txt; sort -u ${d}/streamed.txt | wc -l`)
  assert.equal(size.stdout, `${16 * 64 * 1024}\n1\n`, `the streamed file: ${JSON.stringify(size)}`)
  // gzip: the upload compressed, the file as it was; the download too
  const text = `compressible ${runTag} `.repeat(2000)
  await sbx.files.write(`${d}/gz.txt`, text, { gzip: true })
  assert.equal((await sbx.commands.run(`head -c 13 ${d}/gz.txt`)).stdout, 'compressible ', 'the file is stored inflated')
  assert.equal(await sbx.files.read(`${d}/gz.txt`), text, 'read back')
  assert.equal(await sbx.files.read(`${d}/gz.txt`, { gzip: true }), text, 'read back with gzip')
  // writeFiles, the alias
  const wf = await sbx.files.writeFiles([{ path: `${d}/wf.txt`, data: 'via writeFiles\n' }])
  assert.deepEqual(wf.map((w) => w.path), [`${d}/wf.txt`])
  assert.equal(await sbx.files.read(`${d}/wf.txt`), 'via writeFiles\n')
})
