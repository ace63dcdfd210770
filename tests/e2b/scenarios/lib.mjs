// Shared by the scenarios: each is a small program an app could be, using
// the public `e2b` SDK configured only by E2B_API_URL, E2B_SANDBOX_URL and
// E2B_API_KEY. A scenario prints its steps on stdout as it goes, and on
// failure the error (its SDK class, message, stack) on stderr and exits 1;
// what a test wants to read back it prints as one `RESULT {json}` line.
// tests/e2b_sdk.py runs them; docs/testing.md says how to run one by hand.
import assert from 'node:assert/strict'
import { SandboxError } from 'e2b'

for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
  if (!process.env[v]) {
    console.error(`FAIL: ${v} is not set (a scenario talks to the Airlock these name: E2B_API_URL=http://127.0.0.1:PORT E2B_SANDBOX_URL=http://127.0.0.1:PORT E2B_API_KEY=KEY)`)
    process.exit(2)
  }
}
// Debug mode fakes create and connect without any request: never here
if ((process.env.E2B_DEBUG ?? '').toLowerCase() === 'true') {
  console.error('FAIL: E2B_DEBUG=true makes the SDK skip the API; unset it')
  process.exit(2)
}

const t0 = Date.now()

/** One line of progress, with the seconds since the start. */
export function step(msg) {
  console.log(`[${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}`)
}

/** What a test reads back (tests/e2b_sdk.py: the last RESULT line). */
export function result(obj) {
  console.log(`RESULT ${JSON.stringify(obj)}`)
}

/** An error as the SDK made it: its class (name), message, HTTP status. */
export function describe(err) {
  if (!(err instanceof Error)) return `${typeof err} ${String(err)}`
  const status = err.statusCode !== undefined ? ` (statusCode ${err.statusCode})` : ''
  return `${err.constructor?.name ?? err.name}${status}: ${err.message}`
}

/**
 * Awaits promise, which must reject with an instance of cls; returns the
 * error. Fails naming what it got instead (a value, or another error).
 */
export async function rejects(promise, cls, what) {
  let value
  try {
    value = await promise
  } catch (err) {
    assert.ok(err instanceof cls,
      `${what}: expected ${cls.name}, got ${describe(err)}\n${err?.stack ?? ''}`)
    step(`${what}: ${describe(err)} (as expected)`)
    return err
  }
  assert.fail(`${what}: expected it to reject with ${cls.name}, it resolved to ${JSON.stringify(value)}`)
}

/** a must be a valid Date. */
export function isDate(a, what) {
  assert.ok(a instanceof Date && !Number.isNaN(a.getTime()),
    `${what}: expected a valid Date, got ${a instanceof Date ? 'Invalid Date' : JSON.stringify(a)}`)
}

/** Dates a and b (or a number of ms) must be within slackMs of each other. */
export function near(a, b, slackMs, what) {
  const ta = a instanceof Date ? a.getTime() : a
  const tb = b instanceof Date ? b.getTime() : b
  assert.ok(Math.abs(ta - tb) <= slackMs,
    `${what}: ${new Date(ta).toISOString()} is ${((ta - tb) / 1000).toFixed(1)} s from ` +
    `${new Date(tb).toISOString()}, more than the ${slackMs / 1000} s allowed`)
}

/** Resolves after ms. */
export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

/**
 * Polls fn (sync or async) every intervalMs until it returns a truthy value,
 * which it returns; fails naming what after timeoutMs, with the last value.
 */
export async function until(fn, timeoutMs, what, intervalMs = 200) {
  const deadline = Date.now() + timeoutMs
  let last
  for (;;) {
    last = await fn()
    if (last) return last
    if (Date.now() > deadline) {
      assert.fail(`${what}: not so after ${timeoutMs / 1000} s (last: ${JSON.stringify(last)})`)
    }
    await sleep(intervalMs)
  }
}

/** A tag unique to this run, for metadata a list can filter on. */
export const runTag = `e2b-${process.pid}-${t0}`

/**
 * The scenario: runs fn(cleanups), where fn pushes each sandbox it creates
 * onto cleanups; whatever happens they are killed afterwards (a kill that
 * fails fails the scenario only if nothing else did). Exits 0 or 1.
 */
export async function scenario(name, fn) {
  const cleanups = []
  let failed = null
  try {
    await fn(cleanups)
  } catch (err) {
    failed = err
  }
  for (const sbx of cleanups.reverse()) {
    try {
      await sbx.kill()
    } catch (err) {
      console.error(`cleanup: kill of ${sbx.sandboxId} failed: ${describe(err)}`)
      failed ??= err
    }
  }
  if (failed) {
    const kind = failed instanceof assert.AssertionError ? 'assertion' :
      failed instanceof SandboxError ? 'SDK error' : 'error'
    console.error(`FAIL: ${name}: ${kind}: ${describe(failed)}`)
    console.error(failed?.stack ?? '')
    if (failed?.cause) console.error(`cause: ${describe(failed.cause)}\n${failed.cause.stack ?? ''}`)
    process.exit(1)
  }
  step(`ok: ${name}`)
  process.exit(0)
}
