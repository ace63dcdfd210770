// Needs envd: an uploadUrl(path) names the file it writes, whatever
// filename the multipart part carries (a Blob's is "blob", a browser File's
// its local name): reference envd takes the destination from ?path= and a
// part's filename only when there is none.
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { scenario, step } from './lib.mjs'

await scenario('uploadUrl names the file', async (cleanups) => {
  const sbx = await Sandbox.create()
  cleanups.push(sbx)
  step(`created ${sbx.sandboxId}`)
  for (const [i, filename] of [[1, undefined], [2, 'report.txt']]) {
    const dest = `/tmp/upload-url/dest-${i}.txt`
    const f = new FormData()
    if (filename === undefined) f.append('file', new Blob([`content ${i}\n`]))
    else f.append('file', new Blob([`content ${i}\n`]), filename)
    const res = await fetch(await sbx.uploadUrl(dest), { method: 'POST', body: f })
    const body = await res.text()
    step(`POST uploadUrl('${dest}') with a part named ${filename ?? 'blob (a Blob)'}: ${res.status} ${body}`)
    assert.equal(res.status, 200, body)
    assert.equal(JSON.parse(body)[0]?.path, dest, `the upload answered another path: ${body}`)
    assert.equal(await sbx.files.exists(dest), true, `${dest} was not written (${body})`)
    assert.equal(await sbx.files.read(dest), `content ${i}\n`)
  }
})
