// Needs envd: N sandboxes at once (Sandbox.create(), the python template),
// each running a command and a file write and read concurrently, all killed
// at the end; prints how long each phase took. Usage: many.mjs N
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { scenario, step, result, runTag } from './lib.mjs'

const n = Number(process.argv[2] ?? 20)

await scenario(`${n} sandboxes at once`, async (cleanups) => {
  const t0 = Date.now()
  const made = await Promise.allSettled(Array.from({ length: n }, (_, i) =>
    Sandbox.create({ metadata: { suite: runTag, i: String(i) }, timeoutMs: 900_000 })))
  for (const m of made) if (m.status === 'fulfilled') cleanups.push(m.value)
  const tCreated = Date.now()
  const failures = made.filter((m) => m.status === 'rejected').map((m) => String(m.reason))
  step(`${n - failures.length}/${n} created in ${tCreated - t0} ms${failures.length ? `; failed: ${failures.join('; ')}` : ''}`)
  assert.deepEqual(failures, [], 'creates failed')
  const sandboxes = made.map((m) => m.value)
  const work = await Promise.allSettled(sandboxes.map(async (sbx, i) => {
    const t = Date.now()
    const [cmd] = await Promise.all([
      sbx.commands.run(`echo sandbox-${i}; python3 -c "print(${i} * 2)"`, { timeoutMs: 300_000, requestTimeoutMs: 300_000 }),
      (async () => {
        await sbx.files.write(`/tmp/file-${i}.txt`, `content of ${i} ${runTag}\n`, { requestTimeoutMs: 300_000 })
        const back = await sbx.files.read(`/tmp/file-${i}.txt`, { requestTimeoutMs: 300_000 })
        assert.equal(back, `content of ${i} ${runTag}\n`, `${sbx.sandboxId}: the file read back`)
      })(),
    ])
    assert.equal(cmd.stdout, `sandbox-${i}\n${i * 2}\n`, `${sbx.sandboxId}: the command`)
    return Date.now() - t
  }))
  const tWorked = Date.now()
  const bad = work.filter((w) => w.status === 'rejected').map((w) => String(w.reason))
  const each = work.filter((w) => w.status === 'fulfilled').map((w) => w.value)
  step(`work in ${tWorked - tCreated} ms (each: min ${Math.min(...each)} ms, max ${Math.max(...each)} ms)` +
    `${bad.length ? `; failed: ${bad.join('; ')}` : ''}`)
  assert.deepEqual(bad, [], 'commands or files failed')
  // a sandbox's file is its own
  const other = await sandboxes[0].files.exists('/tmp/file-1.txt')
  assert.equal(other, false, "one sandbox's file is in another")
  const killed = await Promise.all(sandboxes.map((s) => s.kill()))
  cleanups.length = 0
  const tKilled = Date.now()
  assert.ok(killed.every((k) => k === true), `kill results: ${JSON.stringify(killed)}`)
  const left = await Sandbox.list({ query: { metadata: { suite: runTag } } }).nextItems()
  assert.deepEqual(left.map((s) => s.sandboxId), [], 'sandboxes left after the kills')
  const times = { n, createMs: tCreated - t0, workMs: tWorked - tCreated, killMs: tKilled - tWorked, totalMs: tKilled - t0 }
  step(`times: ${JSON.stringify(times)}`)
  result(times)
})
