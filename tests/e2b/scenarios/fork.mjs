// Needs envd: Sandbox.fork(id, {count, timeoutMs}) and sandbox.fork():
// each child is a running Sandbox with the parent's files (and a process
// the parent had running), its own id and timeout; children and parent
// diverge afterwards; the parent keeps running. A fork of a sandbox that
// is not there rejects with SandboxNotFoundError.
import assert from 'node:assert/strict'
import { Sandbox, SandboxNotFoundError } from 'e2b'
import { scenario, step, result, rejects, near, runTag } from './lib.mjs'

await scenario('fork', async (cleanups) => {
  const parent = await Sandbox.create({ metadata: { suite: runTag }, timeoutMs: 600_000 })
  cleanups.push(parent)
  step(`created ${parent.sandboxId}`)
  await parent.files.write('/root/state.txt', `parent ${runTag}\n`)
  const t = Date.now()
  const forks = await Sandbox.fork(parent.sandboxId, { count: 2, timeoutMs: 120_000 })
  step(`Sandbox.fork(count 2) in ${Date.now() - t} ms: ${forks.map((f) => (f instanceof Error ? `${f.constructor.name}: ${f.message}` : f.sandboxId)).join(', ')}`)
  for (const f of forks) if (f instanceof Sandbox) cleanups.push(f)
  assert.equal(forks.length, 2, 'one entry per fork asked for')
  for (const f of forks) assert.ok(f instanceof Sandbox, `a fork failed: ${f}`)
  const ids = new Set([parent.sandboxId, ...forks.map((f) => f.sandboxId)])
  assert.equal(ids.size, 3, 'the children have ids of their own')
  for (const f of forks) {
    const info = await f.getInfo()
    assert.equal(info.state, 'running', `${f.sandboxId}: state`)
    near(info.endAt, Date.now() + 120_000, 30_000, `${f.sandboxId}: endAt against its timeoutMs`)
    assert.equal(await f.files.read('/root/state.txt'), `parent ${runTag}\n`, `${f.sandboxId}: the parent's file`)
  }
  // diverge: each writes its own; nobody sees another's
  await forks[0].files.write('/root/state.txt', 'child 0\n')
  await forks[1].commands.run('echo "child 1" > /root/state.txt; touch /root/only-child-1')
  await parent.files.write('/root/parent-later.txt', 'after the fork\n')
  assert.equal(await forks[0].files.read('/root/state.txt'), 'child 0\n')
  assert.equal(await forks[1].files.read('/root/state.txt'), 'child 1\n')
  assert.equal(await parent.files.read('/root/state.txt'), `parent ${runTag}\n`, "a child's write reached the parent")
  assert.equal(await forks[0].files.exists('/root/only-child-1'), false, "a child's file reached its sibling")
  assert.equal(await forks[0].files.exists('/root/parent-later.txt'), false, "the parent's later file reached a child")
  const pinfo = await parent.getInfo()
  assert.equal(pinfo.state, 'running', 'the parent after the fork')
  // the instance form, default count
  const one = await parent.fork()
  for (const f of one) if (f instanceof Sandbox) cleanups.push(f)
  assert.equal(one.length, 1, `sandbox.fork() gave ${one.length}`)
  assert.ok(one[0] instanceof Sandbox, `sandbox.fork() failed: ${one[0]}`)
  assert.equal(await one[0].files.read('/root/parent-later.txt'), 'after the fork\n', 'a later fork has the later file')
  // a sandbox that is not there
  await rejects(Sandbox.fork('nosuchsandbox0', { count: 1 }), SandboxNotFoundError, 'Sandbox.fork of an unknown id')
  assert.equal(await forks[0].kill(), true)
  await rejects(Sandbox.fork(forks[0].sandboxId), SandboxNotFoundError, 'Sandbox.fork of a killed sandbox')
  result({ children: forks.map((f) => f.sandboxId) })
})
