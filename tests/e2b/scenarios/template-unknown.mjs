// Sandbox.create of a template that does not exist rejects with the SDK's
// generic API error: SandboxError, statusCode 404 (E2B answers
// {"code":404,"message":"template '...' not found"}; createSandbox maps no
// status specially but 401/429/503). The control: a template that exists.
import assert from 'node:assert/strict'
import { Sandbox, SandboxError } from 'e2b'
import { scenario, step, result, rejects, describe } from './lib.mjs'

await scenario('unknown template', async (cleanups) => {
  const name = `no-such-template-${process.pid}`
  const err = await rejects(Sandbox.create(name), SandboxError, `Sandbox.create('${name}')`)
  result({ class: err.constructor.name, name: err.name, statusCode: err.statusCode ?? null, message: err.message })
  assert.equal(err.statusCode, 404, `statusCode of ${describe(err)}`)
  assert.ok(err.message.includes(name), `the message names no template: ${err.message}`)

  const sbx = await Sandbox.create('minimal')
  cleanups.push(sbx)
  step(`control: created ${sbx.sandboxId} from minimal`)
})
