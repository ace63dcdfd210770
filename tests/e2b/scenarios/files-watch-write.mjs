// Needs envd: files.watchDir sees the SDK's own files.write of a new file
// as a create and a write of that file (what reference envd reports: it
// writes the file in place), and reports no name the app never made.
import assert from 'node:assert/strict'
import { FilesystemEventType, Sandbox } from 'e2b'
import { scenario, step, sleep, until } from './lib.mjs'

const show = (events) => JSON.stringify(events.map((e) => `${e.type} ${e.name}`))

await scenario('watchDir sees files.write', async (cleanups) => {
  const sbx = await Sandbox.create()
  cleanups.push(sbx)
  step(`created ${sbx.sandboxId}`)
  const d = '/tmp/watched'
  await sbx.files.makeDir(d)
  const events = []
  const w = await sbx.files.watchDir(d, (e) => { events.push(e) })
  await sbx.files.write(`${d}/written.txt`, 'written by the SDK\n')
  await until(() => events.some((e) => e.name === 'written.txt'), 10_000, `an event for written.txt (${show(events)})`)
  await sbx.files.remove(`${d}/written.txt`)
  await until(() => events.some((e) => e.name === 'written.txt' && e.type === FilesystemEventType.REMOVE), 10_000,
    `remove of written.txt (${show(events)})`)
  await sleep(500)
  await w.stop()
  step(`events: ${show(events)}`)
  const strangers = events.filter((e) => e.name !== 'written.txt')
  assert.deepEqual(strangers.map((e) => `${e.type} ${e.name}`), [], 'events for names the app never made')
  for (const type of [FilesystemEventType.CREATE, FilesystemEventType.WRITE]) {
    assert.ok(events.some((e) => e.name === 'written.txt' && e.type === type), `no ${type} of written.txt: ${show(events)}`)
  }
})
