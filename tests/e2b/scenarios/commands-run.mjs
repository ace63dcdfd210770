// Needs envd: commands.run in the foreground. stdout, stderr and exit codes;
// a non-zero exit rejects with CommandExitError carrying the result; envs
// (the sandbox's, the command's, the command's winning); cwd, and a cwd
// that does not exist rejected; user 'root', and a user the sandbox does
// not have rejected (reference envd: unauthenticated, "invalid username").
// Every error case is followed by the legitimate call succeeding.
import assert from 'node:assert/strict'
import { AuthenticationError, CommandExitError, Sandbox, SandboxError } from 'e2b'
import { scenario, step, result, rejects } from './lib.mjs'

await scenario('commands.run', async (cleanups) => {
  const sbx = await Sandbox.create({ envs: { AIRLOCK_E2B_A: 'from-create', AIRLOCK_E2B_B: 'from-create' } })
  cleanups.push(sbx)
  step(`created ${sbx.sandboxId}`)
  const classes = {}

  // output and exit status
  const ok = await sbx.commands.run('echo out; echo err >&2; printf "no newline"')
  step(`run: ${JSON.stringify(ok)}`)
  assert.equal(ok.exitCode, 0)
  assert.equal(ok.stdout, 'out\nno newline')
  assert.equal(ok.stderr, 'err\n')
  const silent = await sbx.commands.run('true')
  assert.deepEqual([silent.exitCode, silent.stdout, silent.stderr], [0, '', ''], `true: ${JSON.stringify(silent)}`)

  // a non-zero exit: CommandExitError with the whole result
  for (const code of [1, 3, 127]) {
    const err = await rejects(sbx.commands.run(`echo partial; echo oops >&2; exit ${code}`), CommandExitError,
      `a command exiting ${code}`)
    assert.equal(err.exitCode, code, 'CommandExitError.exitCode')
    assert.equal(err.stdout, 'partial\n', 'CommandExitError.stdout')
    assert.equal(err.stderr, 'oops\n', 'CommandExitError.stderr')
    assert.ok(err instanceof SandboxError, 'CommandExitError is a SandboxError')
    assert.equal(typeof err.error, 'string', `CommandExitError.error: ${JSON.stringify(err.error)}`)
  }
  const missing = await rejects(sbx.commands.run('no-such-program-here'), CommandExitError, 'an unknown program')
  assert.equal(missing.exitCode, 127)
  assert.match(missing.stderr, /no-such-program-here/, 'bash says which command it did not find')

  // envs: the sandbox's in every command, the command's beside them, the
  // command's winning where both name a variable
  const env = await sbx.commands.run('echo "[$AIRLOCK_E2B_A] [$AIRLOCK_E2B_B] [$AIRLOCK_E2B_C]"',
    { envs: { AIRLOCK_E2B_B: 'from-command', AIRLOCK_E2B_C: 'only command' } })
  assert.equal(env.stdout, '[from-create] [from-command] [only command]\n', `envs: ${JSON.stringify(env)}`)
  const again = await sbx.commands.run('echo "[$AIRLOCK_E2B_B] [${AIRLOCK_E2B_C-unset}]"')
  assert.equal(again.stdout, '[from-create] [unset]\n', 'a command\'s envs leak into the next command')

  // cwd
  const cwd = await sbx.commands.run('pwd', { cwd: '/tmp' })
  assert.equal(cwd.stdout, '/tmp\n', `cwd /tmp: ${JSON.stringify(cwd)}`)
  const nested = await sbx.commands.run('mkdir -p /tmp/a/b && cd /tmp && pwd', { cwd: '/' })
  assert.equal(nested.stdout, '/tmp\n')
  const noDir = await rejects(sbx.commands.run('pwd', { cwd: '/no/such/dir' }), SandboxError, 'cwd that does not exist')
  classes.missingCwd = noDir.constructor.name
  assert.ok(!(noDir instanceof CommandExitError), 'a missing cwd must not start the command')
  assert.match(noDir.message, /\/no\/such\/dir/, 'the error names the directory')
  assert.equal((await sbx.commands.run('pwd', { cwd: '/tmp/a/b' })).stdout, '/tmp/a/b\n', 'cwd after the refusal')

  // user
  const root = await sbx.commands.run('id -un; id -u; echo $HOME; pwd', { user: 'root' })
  assert.equal(root.stdout, 'root\n0\n/root\n/root\n', `user root (home as cwd): ${JSON.stringify(root)}`)
  const nobody = await rejects(sbx.commands.run('id -un', { user: 'no-such-user' }), AuthenticationError,
    'a user the sandbox does not have')
  classes.unknownUser = nobody.constructor.name
  assert.match(nobody.message, /no-such-user/, 'the error names the user')
  assert.equal((await sbx.commands.run('id -un', { user: 'root' })).stdout, 'root\n', 'user root after the refusal')

  step(`error classes: ${JSON.stringify(classes)}`)
  result(classes)
})
