// kill(): true, then the sandbox is gone for every verb (SandboxNotFoundError,
// or false where the SDK says so).
import assert from 'node:assert/strict'
import { Sandbox, SandboxNotFoundError } from 'e2b'
import { scenario, step, rejects } from './lib.mjs'

await scenario('kill', async (cleanups) => {
  const sbx = await Sandbox.create({ metadata: { scenario: 'kill' } })
  cleanups.push(sbx)
  const id = sbx.sandboxId
  step(`created ${id}`)
  assert.equal((await Sandbox.getInfo(id)).state, 'running')

  assert.equal(await sbx.kill(), true, 'kill() of a running sandbox')
  step('killed')
  await rejects(Sandbox.getInfo(id), SandboxNotFoundError, 'Sandbox.getInfo after kill')
  await rejects(sbx.getInfo(), SandboxNotFoundError, 'getInfo() after kill')
  assert.equal(await Sandbox.kill(id), false, 'Sandbox.kill(id) of a killed sandbox')
  assert.equal(await sbx.kill(), false, 'kill() again')
  await rejects(sbx.setTimeout(60_000), SandboxNotFoundError, 'setTimeout after kill')
  await rejects(sbx.pause(), SandboxNotFoundError, 'pause after kill')
  await rejects(Sandbox.connect(id), SandboxNotFoundError, 'Sandbox.connect after kill')
  const listed = []
  for (const p = Sandbox.list(); p.hasNext;) listed.push(...(await p.nextItems()))
  assert.ok(!listed.some((s) => s.sandboxId === id), 'a killed sandbox is still listed')
  // an id that never was
  await rejects(Sandbox.getInfo('nosuchsandbox0'), SandboxNotFoundError, 'Sandbox.getInfo of an unknown id')
  assert.equal(await Sandbox.kill('nosuchsandbox0'), false, 'Sandbox.kill of an unknown id')
})
