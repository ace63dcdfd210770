// A wrong API key: AuthenticationError (HTTP 401) for every call, and it
// changes nothing; the same calls with the right key (E2B_API_KEY) succeed.
import assert from 'node:assert/strict'
import { AuthenticationError, Sandbox } from 'e2b'
import { scenario, step, rejects, runTag } from './lib.mjs'

const wrong = { apiKey: `wrong-${runTag}` }

await scenario('wrong API key', async (cleanups) => {
  await rejects(Sandbox.create(wrong), AuthenticationError, 'Sandbox.create with a wrong key')
  await rejects(Sandbox.create('minimal', wrong), AuthenticationError, "Sandbox.create('minimal') with a wrong key")
  await rejects(Sandbox.list(wrong).nextItems(), AuthenticationError, 'Sandbox.list with a wrong key')

  // the control: the right key creates
  const sbx = await Sandbox.create({ metadata: { suite: runTag } })
  cleanups.push(sbx)
  step(`created ${sbx.sandboxId} with the right key`)
  const id = sbx.sandboxId
  await rejects(Sandbox.getInfo(id, wrong), AuthenticationError, 'Sandbox.getInfo with a wrong key')
  await rejects(Sandbox.kill(id, wrong), AuthenticationError, 'Sandbox.kill with a wrong key')
  await rejects(Sandbox.setTimeout(id, 60_000, wrong), AuthenticationError, 'Sandbox.setTimeout with a wrong key')
  await rejects(Sandbox.pause(id, wrong), AuthenticationError, 'Sandbox.pause with a wrong key')
  await rejects(Sandbox.connect(id, wrong), AuthenticationError, 'Sandbox.connect with a wrong key')
  const info = await Sandbox.getInfo(id)
  assert.equal(info.state, 'running', 'after the wrong key\'s kill and pause')
})
