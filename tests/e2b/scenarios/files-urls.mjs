// Needs envd: sandbox.uploadUrl() and downloadUrl() are URLs that work with
// a plain fetch() (no headers: a browser, curl, another service), signed
// with the sandbox's envd access token: download GETs the file, upload
// POSTs multipart/form-data (a field named 'file', as E2B's docs show:
// form.append('file', 'file content')). A tampered, foreign, expired or
// missing signature is refused with 401 and changes nothing.
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { scenario, step, runTag } from './lib.mjs'

const form = (value, filename) => {
  const f = new FormData()
  if (filename === undefined) f.append('file', value)
  else f.append('file', value, filename)
  return f
}

await scenario('upload and download URLs', async (cleanups) => {
  const sbx = await Sandbox.create()
  cleanups.push(sbx)
  step(`created ${sbx.sandboxId}`)
  assert.ok(sbx.envdAccessToken, 'the sandbox has no envd access token: its URLs are not signed')
  await sbx.files.write('/tmp/urls/down.txt', `download me ${runTag}\n`)

  // download
  const down = await sbx.downloadUrl('/tmp/urls/down.txt')
  step(`downloadUrl: ${down}`)
  const u = new URL(down)
  assert.equal(u.searchParams.get('path'), '/tmp/urls/down.txt')
  assert.match(u.searchParams.get('signature') ?? '', /^v1_/, 'the URL is signed')
  const r = await fetch(down)
  assert.equal(r.status, 200, `GET downloadUrl: ${r.status} ${await r.clone().text()}`)
  assert.equal(await r.text(), `download me ${runTag}\n`)
  // bytes come back as they are
  const all = new Uint8Array(256).map((_, i) => i)
  await sbx.files.write('/tmp/urls/all.bin', all)
  const rb = await fetch(await sbx.downloadUrl('/tmp/urls/all.bin'))
  assert.ok(Buffer.from(await rb.arrayBuffer()).equals(Buffer.from(all)), 'the downloaded bytes differ')
  // with an expiration
  const timed = await sbx.downloadUrl('/tmp/urls/down.txt', { useSignatureExpiration: 120 })
  assert.ok(new URL(timed).searchParams.get('signature_expiration'), 'no signature_expiration')
  assert.equal((await fetch(timed)).status, 200, 'GET of a URL signed for 120 s')
  // a signed URL of a file that is not there
  const missing = await fetch(await sbx.downloadUrl('/tmp/urls/missing.txt'))
  assert.equal(missing.status, 404, 'GET downloadUrl of a missing file')

  // upload, the documented form: a field 'file' (no filename)
  const up = await sbx.uploadUrl('/tmp/urls/up.txt')
  step(`uploadUrl: ${up}`)
  // (a string field: FormData sends its line breaks as CRLF, so none here)
  const ru = await fetch(up, { method: 'POST', body: form(`uploaded ${runTag}`) })
  const ruText = await ru.text()
  step(`POST uploadUrl: ${ru.status} ${ruText}`)
  assert.equal(ru.status, 200, `POST uploadUrl: ${ru.status} ${ruText}`)
  assert.equal(await sbx.files.read('/tmp/urls/up.txt'), `uploaded ${runTag}`, 'the uploaded file')
  // uploadUrl() without a path: the part's filename says where
  const upAny = await sbx.uploadUrl()
  const ra = await fetch(upAny, { method: 'POST', body: form(new Blob(['named by the part\n']), '/tmp/urls/named.txt') })
  assert.equal(ra.status, 200, `POST uploadUrl(): ${ra.status} ${await ra.text()}`)
  assert.equal(await sbx.files.read('/tmp/urls/named.txt'), 'named by the part\n')

  // refused: 401, nothing read or written
  const refused = async (url, init, what) => {
    const res = await fetch(url, init)
    const body = await res.text()
    step(`${what}: ${res.status} ${body.trim()}`)
    assert.equal(res.status, 401, `${what}: ${res.status} ${body}`)
    assert.ok(!body.includes(runTag), `${what} gave the file away`)
  }
  const tampered = new URL(down)
  const sig = tampered.searchParams.get('signature')
  tampered.searchParams.set('signature', sig.slice(0, -4) + (sig.endsWith('AAAA') ? 'BBBB' : 'AAAA'))
  await refused(tampered, {}, 'GET with a tampered signature')
  const foreign = new URL(down)
  foreign.searchParams.set('path', '/tmp/urls/all.bin')
  await refused(foreign, {}, "GET of another path with down.txt's signature")
  const unsigned = new URL(down)
  unsigned.searchParams.delete('signature')
  await refused(unsigned, {}, 'GET without a signature')
  const expired = await sbx.downloadUrl('/tmp/urls/down.txt', { useSignatureExpiration: -60 })
  await refused(expired, {}, 'GET with an expired signature')
  const readSigned = await sbx.downloadUrl('/tmp/urls/up.txt')
  await refused(readSigned, { method: 'POST', body: form('overwritten') }, 'POST with a download (read) signature')
  const upTampered = new URL(up)
  upTampered.searchParams.set('signature', 'v1_' + 'A'.repeat(43))
  await refused(upTampered, { method: 'POST', body: form('overwritten') }, 'POST with a forged signature')
  assert.equal(await sbx.files.read('/tmp/urls/up.txt'), `uploaded ${runTag}`, 'a refused upload changed the file')
  // and the good URL still works
  assert.equal((await fetch(down)).status, 200, 'GET downloadUrl after the refusals')
})
