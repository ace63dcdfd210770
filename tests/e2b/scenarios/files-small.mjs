// Needs envd: files.write of small contents (0 to 8 bytes: a flag, "ok",
// a digit) gives one WriteInfo for one file, and a multi-file write one
// WriteInfo per file, as for larger ones.
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { scenario, step } from './lib.mjs'

await scenario('small writes', async (cleanups) => {
  const sbx = await Sandbox.create()
  cleanups.push(sbx)
  step(`created ${sbx.sandboxId}`)
  const shapes = {}
  for (let n = 0; n <= 8; n++) {
    const data = 'abcdefgh'.slice(0, n)
    const w = await sbx.files.write(`/tmp/small-${n}`, data)
    shapes[n] = Array.isArray(w) ? `a list of ${w.length}` : 'one WriteInfo'
    assert.equal(await sbx.files.read(`/tmp/small-${n}`), data, `read back ${n} bytes`)
  }
  step(`files.write of 0..8 bytes gave: ${JSON.stringify(shapes)}`)
  for (const [n, shape] of Object.entries(shapes)) {
    assert.equal(shape, 'one WriteInfo', `files.write of ${n} bytes: ${JSON.stringify(shapes)}`)
  }
  const multi = await sbx.files.write([{ path: '/tmp/m/a', data: '1' }, { path: '/tmp/m/b', data: 'ok\n' }])
  step(`multi-file write: ${JSON.stringify(multi)}`)
  assert.deepEqual(multi.map((x) => x.path), ['/tmp/m/a', '/tmp/m/b'], 'one WriteInfo per file')
})
