// Needs envd: a sandbox created with timeoutMs is killed at its lifetime.
// Running and answering commands before (the control, also 1 s before the
// timeout), gone afterwards: getInfo rejects with SandboxNotFoundError
// (waited for, not slept for), isRunning() is false, kill() false; another
// sandbox without a timeout is untouched.
import assert from 'node:assert/strict'
import { Sandbox, SandboxNotFoundError } from 'e2b'
import { scenario, step, rejects, sleep, until } from './lib.mjs'

const TIMEOUT_MS = 5000

await scenario('killed at its timeout', async (cleanups) => {
  const t0 = Date.now()
  const sbx = await Sandbox.create({ timeoutMs: TIMEOUT_MS })
  cleanups.push(sbx)
  const other = await Sandbox.create()
  cleanups.push(other)
  step(`created ${sbx.sandboxId} (timeoutMs ${TIMEOUT_MS}) and ${other.sandboxId} (no timeout)`)
  assert.equal((await sbx.getInfo()).state, 'running')
  assert.equal((await sbx.commands.run('echo alive')).stdout, 'alive\n', 'a command before the timeout')

  // still there 1 s before its lifetime ends (counted from before the
  // create: the server's clock starts later, if anything)
  await sleep(Math.max(0, t0 + TIMEOUT_MS - 1000 - Date.now()))
  const asked = Date.now() - t0
  assert.ok(asked < TIMEOUT_MS - 500, `the check before the timeout came ${asked} ms after the create: too late`)
  assert.equal((await sbx.getInfo()).state, 'running', `getInfo ${asked} ms after the create`)
  step(`running ${asked} ms after the create`)

  // then gone
  await until(async () => {
    try {
      await sbx.getInfo()
      return false
    } catch (err) {
      if (err instanceof SandboxNotFoundError) return true
      throw err
    }
  }, 15_000, 'getInfo rejecting with SandboxNotFoundError after the timeout')
  const gone = Date.now() - t0
  step(`gone ${gone} ms after the create`)
  assert.ok(gone >= TIMEOUT_MS, `gone ${gone} ms after the create, before its timeout of ${TIMEOUT_MS} ms`)
  await rejects(Sandbox.getInfo(sbx.sandboxId), SandboxNotFoundError, 'Sandbox.getInfo after the timeout')
  assert.equal(await sbx.isRunning(), false, 'isRunning() after the timeout')
  assert.equal(await sbx.kill(), false, 'kill() after the timeout')
  const listed = []
  for (const p = Sandbox.list(); p.hasNext;) listed.push(...(await p.nextItems()))
  assert.ok(!listed.some((s) => s.sandboxId === sbx.sandboxId), 'the timed-out sandbox is still listed')
  assert.equal((await other.getInfo()).state, 'running', 'the sandbox without a timeout')
  assert.equal((await other.commands.run('echo still')).stdout, 'still\n')
})
