// Needs envd: the user of a filesystem call. 'root' works for write, read,
// list, exists, makeDir and remove; a user the sandbox does not have is
// refused with AuthenticationError (reference envd: 401 / unauthenticated
// "invalid username"), as commands.run refuses it, and writes nothing. A
// user it has (alice, made by root here: the templates have none) works
// with its own permissions: what it writes or makes is alice's, relative
// paths start in its home, and what root keeps to itself (a 0600 file, a
// 0700 directory, a directory it may not write) is refused to it with a
// SandboxError (403 / permission_denied) while root's own calls work.
import assert from 'node:assert/strict'
import { AuthenticationError, Sandbox, SandboxError } from 'e2b'
import { scenario, step, rejects } from './lib.mjs'

/** A refusal for want of permissions: a SandboxError, not the user's. */
async function denied(promise, what) {
  const err = await rejects(promise, SandboxError, what)
  assert.match(err.message, /^403: .*Permission denied|\[permission_denied\]/, `${what}: ${err.message}`)
}

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

  // a user the sandbox has
  await sbx.commands.run('id alice >/dev/null 2>&1 || useradd -m -U alice', root)
  const alice = { user: 'alice' }
  await sbx.files.write('/tmp/ua/alice.txt', 'written as alice\n', alice)
  assert.equal(await sbx.files.read('/tmp/ua/alice.txt', alice), 'written as alice\n')
  const info = await sbx.files.getInfo('/tmp/ua/alice.txt', alice)
  assert.equal(info.owner, 'alice', 'the owner of a file alice wrote')
  assert.equal(info.group, 'alice', 'the group of a file alice wrote')
  assert.equal((await sbx.commands.run('stat -c %U:%G /tmp/ua /tmp/ua/alice.txt', root)).stdout,
    'alice:alice\nalice:alice\n', 'the directory the write made and the file, as stat sees them')
  assert.equal(await sbx.files.makeDir('/tmp/ua/made', alice), true)
  assert.equal((await sbx.files.getInfo('/tmp/ua/made', alice)).owner, 'alice', 'the owner of a directory alice made')
  await sbx.files.write('notes.txt', 'in her home\n', alice)
  assert.equal((await sbx.commands.run('stat -c %U /home/alice/notes.txt', root)).stdout, 'alice\n',
    'a relative path as alice is in her home')
  assert.deepEqual((await sbx.files.list('/tmp/ua', alice)).map((e) => e.name).sort(), ['alice.txt', 'made'])
  await sbx.files.rename('/tmp/ua/alice.txt', '/tmp/ua/renamed.txt', alice)
  await sbx.files.remove('/tmp/ua/renamed.txt', alice)
  assert.equal(await sbx.files.exists('/tmp/ua/renamed.txt', alice), false)

  // what root keeps to itself
  await sbx.files.write('/tmp/u/secret.txt', 'root only\n', root)
  await sbx.commands.run('chmod 600 /tmp/u/secret.txt && mkdir -p -m 700 /tmp/u/private', root)
  await denied(sbx.files.read('/tmp/u/secret.txt', alice), 'files.read of a 0600 file of root as alice')
  assert.equal(await sbx.files.read('/tmp/u/secret.txt', root), 'root only\n', 'root reads it')
  assert.equal(await sbx.files.read('/tmp/u/secret.txt'), 'root only\n', 'no user is root')
  await denied(sbx.files.list('/tmp/u/private', alice), 'files.list of a 0700 directory of root as alice')
  assert.deepEqual(await sbx.files.list('/tmp/u/private', root), [], 'root lists it')
  await denied(sbx.files.write('/tmp/u/alice.txt', 'not hers to write\n', alice),
    'files.write into a 0755 directory of root as alice')
  await denied(sbx.files.makeDir('/tmp/u/alice-dir', alice), 'files.makeDir in a 0755 directory of root as alice')
  await denied(sbx.files.remove('/tmp/u/secret.txt', alice), 'files.remove of a file of root as alice')
  assert.equal(await sbx.files.exists('/tmp/u/alice.txt'), false, 'the refused write wrote the file')
  assert.equal(await sbx.files.exists('/tmp/u/alice-dir'), false, 'the refused makeDir made the directory')
  assert.equal(await sbx.files.exists('/tmp/u/secret.txt'), true, 'the refused remove removed the file')
  assert.equal((await sbx.files.getInfo('/tmp/u/secret.txt')).owner, 'root')
})
