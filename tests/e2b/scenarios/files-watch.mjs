// Needs envd: files.watchDir. Events for what happens in the directory
// after the watch started (create and write of a new file, its remove, a
// new subdirectory), named relative to it; not for a subdirectory's files
// unless recursive, then as sub/NAME; none after stop(). A directory that
// does not exist rejects with FileNotFoundError. The changes are made by
// commands, as a program in the sandbox would make them. What a watch must
// not report is shown to have happened by a second, recursive watch (the
// witness) that does report it.
import assert from 'node:assert/strict'
import { FileNotFoundError, FilesystemEventType, Sandbox } from 'e2b'
import { scenario, step, result, rejects, until } from './lib.mjs'

const has = (events, name, type) => events.some((e) => e.name === name && e.type === type)
const show = (events) => JSON.stringify(events.map((e) => `${e.type} ${e.name}`))

await scenario('watchDir', async (cleanups) => {
  const sbx = await Sandbox.create()
  cleanups.push(sbx)
  step(`created ${sbx.sandboxId}`)
  const d = '/tmp/watched'
  await sbx.files.makeDir(`${d}/sub`)
  await sbx.commands.run(`echo old > ${d}/before.txt`)

  // non-recursive, and the witness
  const events = []
  let exit = null
  const w = await sbx.files.watchDir(d, (e) => { events.push(e) }, { onExit: (err) => { exit = { err } } })
  const seen = []
  const witness = await sbx.files.watchDir(d, (e) => { seen.push(e) }, { recursive: true })
  step('watching')
  await sbx.commands.run(`echo hello > ${d}/new.txt`)
  await until(() => has(events, 'new.txt', FilesystemEventType.CREATE) && has(events, 'new.txt', FilesystemEventType.WRITE),
    10_000, `create and write of new.txt (${show(events)})`)
  await sbx.commands.run(`rm ${d}/new.txt; mkdir ${d}/newdir; echo deep > ${d}/sub/deep.txt`)
  await until(() => has(events, 'new.txt', FilesystemEventType.REMOVE) && has(events, 'newdir', FilesystemEventType.CREATE),
    10_000, `remove of new.txt and create of newdir (${show(events)})`)
  // what a non-recursive watch must not report has happened: the witness saw it
  await until(() => has(seen, 'sub/deep.txt', FilesystemEventType.CREATE), 10_000,
    `the witness: create of sub/deep.txt (${show(seen)})`)
  step(`events: ${show(events)}`)
  assert.ok(!events.some((e) => e.name.includes('deep')), `a non-recursive watch reported sub/: ${show(events)}`)
  assert.ok(!events.some((e) => e.name.startsWith('/')), `event names are relative to the directory: ${show(events)}`)
  assert.ok(!events.some((e) => e.name === 'before.txt'), 'a file made before the watch started was reported')
  const firstCreate = events.findIndex((e) => e.name === 'new.txt' && e.type === FilesystemEventType.CREATE)
  const firstRemove = events.findIndex((e) => e.name === 'new.txt' && e.type === FilesystemEventType.REMOVE)
  assert.ok(firstCreate < firstRemove, `create after remove: ${show(events)}`)

  // stop: nothing after it
  await w.stop()
  await until(() => exit, 5000, 'onExit after stop()')
  step(`onExit after stop(): ${exit.err ? `${exit.err.constructor.name}: ${exit.err.message.split(':')[0]}` : 'no error'}`)
  const n = events.length
  await sbx.commands.run(`echo late > ${d}/after-stop.txt`)
  await until(() => has(seen, 'after-stop.txt', FilesystemEventType.CREATE), 10_000,
    `the witness: create of after-stop.txt (${show(seen)})`)
  assert.equal(events.length, n, `events after stop(): ${show(events.slice(n))}`)
  await witness.stop()

  // recursive
  const rec = []
  const rw = await sbx.files.watchDir(d, (e) => { rec.push(e) }, { recursive: true })
  await sbx.commands.run(`echo deeper > ${d}/sub/deep2.txt; mkdir -p ${d}/sub/x; echo y > ${d}/sub/x/y.txt`)
  await until(() => has(rec, 'sub/deep2.txt', FilesystemEventType.CREATE) && has(rec, 'sub/x', FilesystemEventType.CREATE),
    10_000, `a recursive watch: create of sub/deep2.txt and sub/x (${show(rec)})`)
  // a directory made after the watch started is watched too
  await until(() => has(rec, 'sub/x/y.txt', FilesystemEventType.CREATE), 10_000,
    `a recursive watch: create of sub/x/y.txt in a new directory (${show(rec)})`)
  step(`recursive events: ${show(rec)}`)
  await rw.stop()

  // a directory that is not there
  await rejects(sbx.files.watchDir(`${d}/no-such-dir`, () => {}), FileNotFoundError, 'watchDir of a missing directory')
  // the watch of a directory that is there still starts
  const again = await sbx.files.watchDir(d, () => {})
  await again.stop()
  result({ onExitAfterStop: exit.err ? exit.err.constructor.name : null })
})
