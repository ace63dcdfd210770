// Needs envd: the user of a filesystem call. 'root' works for write, read,
// list, exists, makeDir and remove; a user the sandbox does not have is
// refused with AuthenticationError (reference envd: 401 / unauthenticated
// "invalid username"), as commands.run refuses it, and writes nothing.
import assert from 'node:assert/strict'
import { AuthenticationError, Sandbox } from 'e2b'
import { scenario, step, rejects } from './lib.mjs'

await scenario('files user', async (cleanups) => {
  const sbx = await Sandbox.create()
  cleanups.push(sbx)
  step(`created ${sbx.sandboxId}`)
  const root = { user: 'root' }
  const bad = { user: 'no-such-user' }
  // the controls
  await sbx.files.write('/tmp/u/root.txt', 'written as root\n', root)
  assert.equal(await sbx.files.read('/tmp/u/root.txt', root), 'written as root\n')
  assert.equal((await sbx.files.getInfo('/tmp/u/root.txt', root)).owner, 'root')
  assert.deepEqual((await sbx.files.list('/tmp/u', root)).map((e) => e.name), ['root.txt'])
  assert.equal(await sbx.files.exists('/tmp/u/root.txt', root), true)
  assert.equal(await sbx.files.makeDir('/tmp/u/dir', root), true)
  // an unknown user
  await rejects(sbx.commands.run('true', bad), AuthenticationError, 'commands.run as an unknown user (for comparison)')
  await rejects(sbx.files.write('/tmp/u/bad.txt', 'must not land\n', bad), AuthenticationError, 'files.write as an unknown user')
  await rejects(sbx.files.read('/tmp/u/root.txt', bad), AuthenticationError, 'files.read as an unknown user')
  await rejects(sbx.files.list('/tmp/u', bad), AuthenticationError, 'files.list as an unknown user')
  await rejects(sbx.files.exists('/tmp/u/root.txt', bad), AuthenticationError, 'files.exists as an unknown user')
  await rejects(sbx.files.makeDir('/tmp/u/bad-dir', bad), AuthenticationError, 'files.makeDir as an unknown user')
  await rejects(sbx.files.remove('/tmp/u/root.txt', bad), AuthenticationError, 'files.remove as an unknown user')
  assert.equal(await sbx.files.exists('/tmp/u/bad.txt'), false, 'the refused write wrote the file')
  assert.equal(await sbx.files.exists('/tmp/u/root.txt'), true, 'the refused remove removed the file')
})
