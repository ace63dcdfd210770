// Sandbox.list(): the metadata and state filters and pagination (limit,
// then nextItems() while hasNext) over three sandboxes of this run.
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { scenario, step, result, isDate, runTag } from './lib.mjs'

/** Every page of a paginator; each at most limit long. */
async function allPages(paginator, limit, what) {
  const pages = []
  while (paginator.hasNext) {
    assert.ok(pages.length < 20, `${what}: still hasNext after 20 pages`)
    const page = await paginator.nextItems()
    step(`${what}: page ${pages.length + 1}: ${page.map((s) => s.sandboxId).join(' ') || '(empty)'}; ` +
      `hasNext ${paginator.hasNext}`)
    if (limit !== undefined) assert.ok(page.length <= limit, `${what}: a page of ${page.length} with limit ${limit}`)
    pages.push(page)
  }
  return pages
}

const ids = (items) => items.map((s) => s.sandboxId).sort()

await scenario('list', async (cleanups) => {
  // a value with the characters the triple encoding of the metadata query
  // must get through (E2B-PROTOCOL.md 3.6)
  const odd = 'a b&c=d%25/é+?'
  const made = []
  for (let i = 0; i < 3; i++) {
    const metadata = { suite: runTag, idx: String(i), 'odd key': odd }
    const sbx = await Sandbox.create({ metadata, timeoutMs: 300_000 })
    cleanups.push(sbx)
    made.push({ id: sbx.sandboxId, metadata })
    step(`created ${sbx.sandboxId} ${JSON.stringify(metadata)}`)
  }
  const all = made.map((m) => m.id).sort()

  // one page at a time, two per page
  const pages = await allPages(
    Sandbox.list({ query: { metadata: { suite: runTag }, state: ['running'] }, limit: 2 }), 2, 'suite, running, limit 2')
  const items = pages.flat()
  assert.ok(pages.length >= 2, `3 sandboxes with limit 2 came in ${pages.length} page(s)`)
  assert.deepEqual(ids(items), all, 'the pages do not hold each of the three sandboxes once')
  for (const s of items) {
    const m = made.find((x) => x.id === s.sandboxId)
    assert.equal(s.state, 'running', `${s.sandboxId}: state`)
    assert.deepEqual(s.metadata, m.metadata, `${s.sandboxId}: metadata`)
    isDate(s.startedAt, `${s.sandboxId}: startedAt`)
    isDate(s.endAt, `${s.sandboxId}: endAt`)
  }

  // filters: one pair selects one; the odd pair all; a pair nobody has none
  const one = (await allPages(Sandbox.list({ query: { metadata: { suite: runTag, idx: '1' } } }), undefined, 'idx 1')).flat()
  assert.deepEqual(ids(one), [made[1].id], 'metadata {suite, idx: 1}')
  const oddItems = (await allPages(Sandbox.list({ query: { metadata: { 'odd key': odd, suite: runTag } } }), undefined, 'odd key')).flat()
  assert.deepEqual(ids(oddItems), all, `metadata {'odd key': ${JSON.stringify(odd)}}`)
  const none = (await allPages(Sandbox.list({ query: { metadata: { suite: `${runTag}-nobody` } } }), undefined, 'nobody')).flat()
  assert.deepEqual(ids(none), [], 'a metadata value no sandbox has')
  const paused = (await allPages(Sandbox.list({ query: { metadata: { suite: runTag }, state: ['paused'] } }), undefined, 'paused')).flat()
  assert.deepEqual(ids(paused), [], 'state paused (none is)')

  // no query: running and paused, ours among them
  const every = ids((await allPages(Sandbox.list(), undefined, 'no query')).flat())
  for (const id of all) assert.ok(every.includes(id), `Sandbox.list() without a query misses ${id}`)

  // a killed one is no longer listed
  assert.equal(await Sandbox.kill(made[0].id), true)
  const left = (await allPages(Sandbox.list({ query: { metadata: { suite: runTag } }, limit: 1 }), 1, 'after a kill')).flat()
  assert.deepEqual(ids(left), all.filter((id) => id !== made[0].id), 'after killing one')
  result({ pages: pages.map((p) => p.length) })
})
