// Needs envd (commands): the envs given to Sandbox.create are in every
// command's environment, with a command's own envs beside them.
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { scenario, step } from './lib.mjs'

await scenario('envs', async (cleanups) => {
  const sbx = await Sandbox.create({ envs: { AIRLOCK_E2B_FOO: 'bar baz', AIRLOCK_E2B_EMPTY: '' } })
  cleanups.push(sbx)
  step(`created ${sbx.sandboxId}`)
  const r = await sbx.commands.run('echo "[$AIRLOCK_E2B_FOO] [${AIRLOCK_E2B_EMPTY-unset}] [$ONE]"', { envs: { ONE: '1' } })
  assert.equal(r.stdout, '[bar baz] [] [1]\n', `the command's environment: ${JSON.stringify(r)}`)
  assert.equal(r.exitCode, 0)
})
