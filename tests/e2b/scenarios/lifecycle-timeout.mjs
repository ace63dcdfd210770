// Needs envd: a sandbox created with timeoutMs is killed at its lifetime.
// Running and answering commands before (the control), gone afterwards:
// getInfo rejects with SandboxNotFoundError, isRunning() is false,
// kill() false; another sandbox without a timeout is untouched.
import assert from 'node:assert/strict'
import { Sandbox, SandboxNotFoundError } from 'e2b'
import { scenario, step, rejects, sleep } from './lib.mjs'

await scenario('killed at its timeout', async (cleanups) => {
  const t0 = Date.now()
  const sbx = await Sandbox.create({ timeoutMs: 5000 })
  cleanups.push(sbx)
  const other = await Sandbox.create()
  cleanups.push(other)
  step(`created ${sbx.sandboxId} (timeoutMs 5000) and ${other.sandboxId} (no timeout)`)
  assert.equal((await sbx.getInfo()).state, 'running')
  assert.equal((await sbx.commands.run('echo alive')).stdout, 'alive\n', 'a command before the timeout')
  await sleep(Math.max(0, t0 + 8000 - Date.now()))
  step('8 s after the create')
  await rejects(sbx.getInfo(), SandboxNotFoundError, 'getInfo after the timeout')
  await rejects(Sandbox.getInfo(sbx.sandboxId), SandboxNotFoundError, 'Sandbox.getInfo after the timeout')
  assert.equal(await sbx.isRunning(), false, 'isRunning() after the timeout')
  assert.equal(await sbx.kill(), false, 'kill() after the timeout')
  const listed = []
  for (const p = Sandbox.list(); p.hasNext;) listed.push(...(await p.nextItems()))
  assert.ok(!listed.some((s) => s.sandboxId === sbx.sandboxId), 'the timed-out sandbox is still listed')
  assert.equal((await other.getInfo()).state, 'running', 'the sandbox without a timeout')
  assert.equal((await other.commands.run('echo still')).stdout, 'still\n')
})
