// pause(): true, state paused (also in the list's paused filter), a second
// pause false; Sandbox.connect(id) resumes it, running again. Control plane
// only (pause-files.mjs checks the guest's state through envd).
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { scenario, step, runTag } from './lib.mjs'

const listed = async (state) => {
  const out = []
  for (const p = Sandbox.list({ query: { metadata: { suite: runTag }, state: [state] } }); p.hasNext;) {
    out.push(...(await p.nextItems()))
  }
  return out.map((s) => `${s.sandboxId}:${s.state}`)
}

await scenario('pause and connect', async (cleanups) => {
  const sbx = await Sandbox.create({ metadata: { suite: runTag }, timeoutMs: 300_000 })
  cleanups.push(sbx)
  const id = sbx.sandboxId
  step(`created ${id}`)

  // connect to a running sandbox: the same one, still running
  const same = await Sandbox.connect(id)
  assert.equal(same.sandboxId, id)
  assert.equal((await sbx.getInfo()).state, 'running', 'after connect to a running sandbox')

  assert.equal(await sbx.pause(), true, 'pause() of a running sandbox')
  step('paused')
  assert.equal((await sbx.getInfo()).state, 'paused', 'state after pause')
  assert.deepEqual(await listed('paused'), [`${id}:paused`], 'list, state paused')
  assert.deepEqual(await listed('running'), [], 'list, state running, while paused')
  assert.equal(await sbx.pause(), false, 'pause() of a paused sandbox')
  assert.equal((await Sandbox.getInfo(id)).state, 'paused', 'state after the second pause')

  const back = await Sandbox.connect(id)
  step(`connected: ${back.sandboxId}`)
  assert.equal(back.sandboxId, id, 'connect gave another sandbox')
  const info = await back.getInfo()
  assert.equal(info.state, 'running', 'state after connect')
  assert.ok(info.endAt.getTime() > Date.now(), `endAt ${info.endAt.toISOString()} is past after connect`)
  assert.deepEqual(await listed('running'), [`${id}:running`], 'list, state running, after connect')

  // the instance form
  assert.equal(await back.pause(), true, 'pause() again after the resume')
  await back.connect()
  assert.equal((await back.getInfo()).state, 'running', 'state after sandbox.connect()')
})
