// @e2b/code-interpreter: Sandbox.create() (template code-interpreter-v1),
// runCode's stdout, an expression's text result, a matplotlib figure as a
// PNG result, an error's name/value/traceback (which does not throw), the
// onStdout callback, envs, and code contexts (create with a cwd, run in it,
// list, remove). Timeouts are those of a slow machine: a kernel's first run
// and matplotlib's first import take tens of seconds under TCG.
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'
import { scenario, step, result } from './lib.mjs'

const slow = { timeoutMs: 240_000, requestTimeoutMs: 240_000 }

await scenario('code interpreter', async (cleanups) => {
  let t = Date.now()
  const sbx = await Sandbox.create({ timeoutMs: 900_000 })
  cleanups.push(sbx)
  const info = await sbx.getInfo()
  step(`created ${sbx.sandboxId} in ${Date.now() - t} ms: template ${info.templateId} (${info.name})`)
  const times = {}
  const timed = async (what, fn) => {
    const t0 = Date.now()
    const v = await fn()
    times[what] = Date.now() - t0
    step(`${what}: ${times[what]} ms`)
    return v
  }

  // stdout, and a print is no result
  const printed = await timed('first runCode', () => sbx.runCode('print(6*7)', slow))
  assert.deepEqual(printed.logs.stdout, ['42\n'], `print(6*7): ${JSON.stringify(printed)}`)
  assert.deepEqual(printed.logs.stderr, [])
  assert.equal(printed.error, undefined)
  assert.equal(printed.text, undefined, 'a print has no main result')
  // an expression's value; state kept between runs
  await sbx.runCode('x = 6', slow)
  const expr = await sbx.runCode('x * 7', slow)
  assert.equal(expr.text, '42', `x * 7: ${JSON.stringify(expr)}`)
  assert.equal(expr.results.length, 1)
  assert.equal(expr.results[0].isMainResult, true)
  assert.ok(Number.isInteger(expr.executionCount), `executionCount ${expr.executionCount}`)
  // stderr
  const warned = await sbx.runCode('import sys; print("careful", file=sys.stderr)', slow)
  assert.deepEqual(warned.logs.stderr, ['careful\n'])

  // an error: no throw, the error in the execution
  const failed = await sbx.runCode('1 / 0', slow)
  step(`error: ${JSON.stringify(failed.error)}`)
  assert.equal(failed.error?.name, 'ZeroDivisionError')
  assert.equal(failed.error?.value, 'division by zero')
  assert.equal(typeof failed.error?.traceback, 'string')
  assert.match(failed.error.traceback, /ZeroDivisionError/)
  const after = await sbx.runCode('x + 1', slow)
  assert.equal(after.text, '7', 'the kernel after an error')

  // onStdout: each line, as it comes
  const lines = []
  const streamed = await sbx.runCode('import time\nfor i in range(3):\n    print(f"line {i}", flush=True)\n    time.sleep(0.5)',
    { ...slow, onStdout: (m) => { lines.push({ line: m.line, error: m.error, at: Date.now() }) } })
  const end = Date.now()
  step(`onStdout: ${JSON.stringify(lines.map((l) => [l.line, end - l.at]))}`)
  assert.deepEqual(lines.map((l) => l.line).join(''), 'line 0\nline 1\nline 2\n')
  assert.ok(lines.every((l) => l.error === false))
  assert.ok(end - lines[0].at >= 700, `the first line came only ${end - lines[0].at} ms before the end`)
  assert.equal(streamed.logs.stdout.join(''), 'line 0\nline 1\nline 2\n')

  // envs of one run
  const env = await sbx.runCode('import os; os.environ.get("AIRLOCK_CI_VAR")', { ...slow, envs: { AIRLOCK_CI_VAR: 'from runCode' } })
  assert.equal(env.text, "'from runCode'", `envs: ${JSON.stringify(env)}`)

  // a matplotlib figure: a PNG result
  const plot = await timed('matplotlib', () => sbx.runCode(
    'import matplotlib\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title("squares")\nplt.show()', slow))
  assert.equal(plot.error, undefined, `matplotlib: ${JSON.stringify(plot.error)}`)
  const png = plot.results.find((r) => r.png)
  assert.ok(png, `no PNG among the results: ${JSON.stringify(plot.results.map((r) => r.formats()))}`)
  const bytes = Buffer.from(png.png, 'base64')
  assert.ok(bytes.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])),
    `the png is not a PNG: ${bytes.subarray(0, 8).toString('hex')}`)
  assert.ok(bytes.length > 1000, `a ${bytes.length}-byte PNG`)
  step(`PNG of ${bytes.length} bytes; formats ${JSON.stringify(png.formats())}`)

  // contexts
  const ctx = await timed('createCodeContext', () => sbx.createCodeContext({ cwd: '/tmp', requestTimeoutMs: 240_000 }))
  step(`context: ${JSON.stringify(ctx)}`)
  assert.equal(typeof ctx.id, 'string')
  assert.equal(ctx.cwd, '/tmp')
  assert.equal(ctx.language, 'python')
  const inCtx = await sbx.runCode('import os; os.getcwd()', { ...slow, context: ctx })
  assert.equal(inCtx.text, "'/tmp'", `cwd in the context: ${JSON.stringify(inCtx)}`)
  const isolated = await sbx.runCode("'x' in globals()", { ...slow, context: ctx })
  assert.equal(isolated.text, 'False', "the default context's x is in the new context")
  const listed = await sbx.listCodeContexts()
  step(`listCodeContexts: ${JSON.stringify(listed)}`)
  assert.ok(listed.some((c) => c.id === ctx.id && c.cwd === '/tmp'), 'the new context is not listed')
  await sbx.removeCodeContext(ctx)
  const left = await sbx.listCodeContexts()
  assert.ok(!left.some((c) => c.id === ctx.id), 'a removed context is still listed')
  // the default context is still there
  assert.equal((await sbx.runCode('x', slow)).text, '6')
  result(times)
})
