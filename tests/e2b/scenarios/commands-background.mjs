// Needs envd: what runs while a command runs. onStdout/onStderr get output
// as it is written (before the command ends); background: true gives a
// handle whose wait() has the result (CommandExitError for a failure);
// sendStdin to a command started with stdin: true (a `cat`, a `head -n1`);
// commands.list() shows a background command as it was started;
// commands.connect(pid) gets what it writes afterwards; a disconnected
// handle leaves the command running; commands.kill(pid) true, then false
// once it is gone, and connect to a gone pid rejects.
import assert from 'node:assert/strict'
import { CommandExitError, NotFoundError, Sandbox, SandboxError } from 'e2b'
import { scenario, step, result, rejects, until } from './lib.mjs'

await scenario('background commands', async (cleanups) => {
  const sbx = await Sandbox.create()
  cleanups.push(sbx)
  step(`created ${sbx.sandboxId}`)

  // streaming: each line reaches its callback while the command still runs
  const seen = []
  const t0 = Date.now()
  const r = await sbx.commands.run('for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 1; done', {
    onStdout: (d) => { seen.push({ stream: 'stdout', data: d, at: Date.now() }) },
    onStderr: (d) => { seen.push({ stream: 'stderr', data: d, at: Date.now() }) },
  })
  const tEnd = Date.now()
  step(`streamed: ${seen.map((s) => `${s.stream} ${JSON.stringify(s.data)} at +${s.at - t0} ms`).join(', ')}; ended at +${tEnd - t0} ms`)
  assert.equal(r.stdout, 'out1\nout2\nout3\n')
  assert.equal(r.stderr, 'err1\nerr2\nerr3\n')
  assert.equal(seen.filter((s) => s.stream === 'stdout').map((s) => s.data).join(''), r.stdout, 'onStdout got all of stdout')
  assert.equal(seen.filter((s) => s.stream === 'stderr').map((s) => s.data).join(''), r.stderr, 'onStderr got all of stderr')
  const first = seen.find((s) => s.data.includes('out1'))
  const firstErr = seen.find((s) => s.data.includes('err1'))
  // the command sleeps 1 s after each line: out1 and err1 come >= 1.5 s
  // before its end if they are streamed, at its end if they are buffered
  assert.ok(tEnd - first.at >= 1500, `onStdout got out1 only ${tEnd - first.at} ms before the command ended`)
  assert.ok(tEnd - firstErr.at >= 1500, `onStderr got err1 only ${tEnd - firstErr.at} ms before the command ended`)

  // background: the handle at once, the result from wait()
  const tb = Date.now()
  const bg = await sbx.commands.run('sleep 2; echo done', { background: true })
  assert.ok(Date.now() - tb < 2000, `background: true returned after ${Date.now() - tb} ms, not at once`)
  assert.ok(Number.isInteger(bg.pid) && bg.pid > 0, `pid ${bg.pid}`)
  step(`background pid ${bg.pid}`)
  const done = await bg.wait()
  assert.deepEqual([done.exitCode, done.stdout, done.stderr], [0, 'done\n', ''], `wait(): ${JSON.stringify(done)}`)
  assert.equal(bg.exitCode, 0, 'handle.exitCode after wait')
  const bad = await sbx.commands.run('echo x; exit 5', { background: true })
  const badErr = await rejects(bad.wait(), CommandExitError, 'wait() of a background command exiting 5')
  assert.equal(badErr.exitCode, 5)
  assert.equal(badErr.stdout, 'x\n')

  // stdin: a cat echoes what it is sent until its stdin is closed
  const cat = await sbx.commands.run('cat', { background: true, stdin: true })
  await cat.sendStdin('hello\n')
  await sbx.commands.sendStdin(cat.pid, new TextEncoder().encode('bytes too\n'))
  await until(() => cat.stdout === 'hello\nbytes too\n', 10_000, `cat's stdout (${JSON.stringify(cat.stdout)})`)
  await cat.closeStdin()
  const catDone = await cat.wait()
  assert.deepEqual([catDone.exitCode, catDone.stdout], [0, 'hello\nbytes too\n'], `cat: ${JSON.stringify(catDone)}`)
  // head -n1 ends by itself after its first line
  const head = await sbx.commands.run('head -n1', { background: true, stdin: true })
  await sbx.commands.sendStdin(head.pid, 'first line\nsecond line\n')
  const headDone = await head.wait()
  assert.equal(headDone.stdout, 'first line\n', `head -n1: ${JSON.stringify(headDone)}`)

  // list: a running background command as it was started
  const ticker = await sbx.commands.run('while true; do echo tick; sleep 0.5; done',
    { background: true, envs: { AIRLOCK_E2B_LIST: 'listed' }, cwd: '/tmp' })
  step(`ticker pid ${ticker.pid}`)
  const procs = await sbx.commands.list()
  step(`commands.list(): ${JSON.stringify(procs)}`)
  const mine = procs.find((p) => p.pid === ticker.pid)
  assert.ok(mine, `commands.list() does not show pid ${ticker.pid}`)
  assert.equal(mine.cmd, '/bin/bash', 'cmd (the SDK runs commands as /bin/bash -l -c CMD)')
  assert.deepEqual(mine.args, ['-l', '-c', 'while true; do echo tick; sleep 0.5; done'], 'args')
  assert.equal(mine.envs.AIRLOCK_E2B_LIST, 'listed', `envs: ${JSON.stringify(mine.envs)}`)
  assert.equal(mine.cwd, '/tmp', 'cwd')
  assert.equal(mine.tag, undefined, 'a command started by commands.run has no tag')
  assert.ok(!procs.some((p) => p.pid === bg.pid || p.pid === cat.pid), 'finished commands are still listed')

  // connect: a second handle gets what the command writes from then on
  const more = []
  const conn = await sbx.commands.connect(ticker.pid, { onStdout: (d) => { more.push(d) } })
  assert.equal(conn.pid, ticker.pid)
  await until(() => more.join('').split('tick\n').length > 3, 10_000, `connect's onStdout (${JSON.stringify(more)})`)
  step(`connect got ${JSON.stringify(more.join(''))}`)

  // kill: true, both handles end with a signal, then false
  assert.equal(await sbx.commands.kill(ticker.pid), true, 'commands.kill of a running command')
  const killed = await rejects(ticker.wait(), CommandExitError, 'wait() of the killed command')
  step(`killed: exitCode ${killed.exitCode}, error ${JSON.stringify(killed.error)}`)
  assert.match(killed.error ?? '', /kill/i, 'the end names the signal')
  await rejects(conn.wait(), CommandExitError, "the connected handle's wait()")
  await until(async () => !(await sbx.commands.list()).some((p) => p.pid === ticker.pid), 5000,
    'the killed command gone from commands.list()')
  assert.equal(await sbx.commands.kill(ticker.pid), false, 'commands.kill of a gone pid')
  const gone = await rejects(sbx.commands.connect(ticker.pid), SandboxError, 'commands.connect to a gone pid')
  // disconnect: the command goes on (reference envd does not kill it), and
  // a connect gets the rest and its end
  const job = await sbx.commands.run('for i in 1 2 3 4 5 6; do echo job$i; sleep 0.5; done', { background: true })
  await until(() => job.stdout.includes('job1'), 10_000, `the job's first line (${JSON.stringify(job.stdout)})`)
  await job.disconnect()
  assert.ok((await sbx.commands.list()).some((p) => p.pid === job.pid), 'a disconnected command is not listed')
  const rest = await sbx.commands.connect(job.pid)
  const jobDone = await rest.wait()
  assert.equal(jobDone.exitCode, 0, `the reconnected job: ${JSON.stringify(jobDone)}`)
  assert.match(jobDone.stdout, /job6\n$/, `the reconnected job's output: ${JSON.stringify(jobDone.stdout)}`)
  // the handle's own kill()
  const sleeper = await sbx.commands.run('sleep 600', { background: true })
  assert.equal(await sleeper.kill(), true, 'handle.kill()')
  await rejects(sleeper.wait(), CommandExitError, 'wait() after handle.kill()')
  // the sandbox still runs commands
  assert.equal((await sbx.commands.run('echo still')).stdout, 'still\n')
  result({ connectGoneClass: gone.constructor.name, connectGoneIsNotFound: gone instanceof NotFoundError })
})
