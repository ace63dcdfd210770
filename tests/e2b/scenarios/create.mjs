// Sandbox.create() (template `base`, which the server maps to one of its
// own) or Sandbox.create(TEMPLATE), with metadata, envs and timeoutMs; then
// getInfo(). Usage: create.mjs [TEMPLATE]
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { scenario, step, result, isDate, near, runTag } from './lib.mjs'

const template = process.argv[2]

await scenario(`create ${template ?? '(default template)'}`, async (cleanups) => {
  const metadata = { suite: runTag, scenario: 'create', 'with space': 'a b' }
  const timeoutMs = 120_000
  const opts = { metadata, envs: { AIRLOCK_E2B_TEST: 'yes' }, timeoutMs }
  step(`Sandbox.create(${template === undefined ? '' : `'${template}', `}${JSON.stringify(opts)})`)
  const before = Date.now()
  const sbx = template === undefined ? await Sandbox.create(opts) : await Sandbox.create(template, opts)
  const after = Date.now()
  cleanups.push(sbx)
  step(`created ${sbx.sandboxId} in ${after - before} ms`)
  assert.equal(typeof sbx.sandboxId, 'string')
  assert.ok(sbx.sandboxId.length > 0, 'sandboxId is empty')

  const info = await sbx.getInfo()
  step(`getInfo: ${JSON.stringify(info)}`)
  assert.equal(info.sandboxId, sbx.sandboxId, 'getInfo names another sandbox')
  assert.equal(info.state, 'running')
  assert.deepEqual(info.metadata, metadata, 'metadata is not what create was given')
  isDate(info.startedAt, 'startedAt')
  isDate(info.endAt, 'endAt')
  // the same clock: started between the request and its answer (1 s of
  // rounding: RFC 3339 times may be whole seconds)
  assert.ok(info.startedAt.getTime() >= before - 1000 && info.startedAt.getTime() <= after + 1000,
    `startedAt ${info.startedAt.toISOString()} is not between the create request ` +
    `(${new Date(before).toISOString()}) and its answer (${new Date(after).toISOString()})`)
  // endAt = expiry = start + timeout (the create's own time as slack)
  near(info.endAt, info.startedAt.getTime() + timeoutMs, 5000 + (after - before), 'endAt against startedAt + timeoutMs')
  assert.equal(typeof info.envdVersion, 'string', 'envdVersion')
  for (const k of ['cpuCount', 'memoryMB']) {
    assert.ok(Number.isInteger(info[k]) && info[k] > 0, `${k} should be a positive integer, is ${info[k]}`)
  }
  if (template !== undefined) {
    // SandboxDetail: templateID is the ID, alias the name (SandboxInfo.name)
    assert.ok(info.templateId === template || info.name === template,
      `asked for template ${template}, getInfo says templateId ${info.templateId}, name ${info.name}`)
  }
  // the static form answers the same
  const again = await Sandbox.getInfo(sbx.sandboxId)
  assert.equal(again.sandboxId, sbx.sandboxId)
  assert.deepEqual(again.metadata, metadata)
  result({ sandboxId: sbx.sandboxId, templateId: info.templateId, name: info.name ?? null,
    envdVersion: info.envdVersion, cpuCount: info.cpuCount, memoryMB: info.memoryMB })
})
