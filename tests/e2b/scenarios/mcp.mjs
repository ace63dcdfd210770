// An agent's view of Airlock's MCP server, with the official MCP TypeScript
// SDK's client (@modelcontextprotocol/sdk) and nothing else: over
// streamable HTTP to AIRLOCK_URL/v1/mcp, or over stdio with `airlock mcp`
// started as an agent starts its tool servers.
//
//   node mcp.mjs http|stdio TEMPLATE [AIRLOCK_BINARY]
//
// AIRLOCK_URL and AIRLOCK_TOKEN (an API key) name the server. It creates a
// sandbox, runs python3 -c 'print(6*7)' and gets 42, follows a command's
// output as progress notifications, writes, reads and lists a file, meets
// each kind of bad input beside the call that works, a timeout and a
// cancellation (the command is gone after it), and deletes the sandbox.
// The last line is RESULT {json} (tests/e2b_sdk.py reads it).
import assert from 'node:assert/strict'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js'
import { McpError } from '@modelcontextprotocol/sdk/types.js'

const [transportKind, template, airlockBinary] = process.argv.slice(2)
const url = process.env.AIRLOCK_URL, token = process.env.AIRLOCK_TOKEN
if (!url || !token || !['http', 'stdio'].includes(transportKind) || !template) {
  console.error('usage: AIRLOCK_URL=... AIRLOCK_TOKEN=... node mcp.mjs http|stdio TEMPLATE [AIRLOCK_BINARY]')
  process.exit(2)
}
const t0 = Date.now()
const step = (msg) => console.log(`[${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}`)

function transport() {
  if (transportKind === 'http')
    return new StreamableHTTPClientTransport(new URL('/v1/mcp', url),
      { requestInit: { headers: { Authorization: `Bearer ${token}` } } })
  // as an agent's configuration starts it: {"command":"airlock","args":["mcp"]}
  return new StdioClientTransport({
    command: airlockBinary, args: ['mcp'], stderr: 'inherit',
    env: { PATH: process.env.PATH, AIRLOCK_URL: url, AIRLOCK_TOKEN: token },
  })
}

const client = new Client({ name: 'airlock-test-agent', version: '1.0.0' })
await client.connect(transport())
const server = client.getServerVersion()
step(`connected over ${transportKind} to ${server.name} ${server.version}, protocol ${client.getNegotiatedProtocolVersion?.() ?? '?'}`)
assert.equal(server.name, 'airlock')

const { tools } = await client.listTools()
const names = tools.map((t) => t.name)
step(`tools: ${names.join(', ')}`)
for (const want of ['create_sandbox', 'run_command', 'run_code', 'read_file', 'write_file', 'list_files',
  'get_port_url', 'snapshot', 'rollback', 'fork', 'suspend', 'delete_sandbox', 'list_sandboxes'])
  assert.ok(names.includes(want), `tools/list lacks ${want}`)
for (const t of tools) {
  assert.equal(t.inputSchema.type, 'object', t.name)
  assert.equal(t.inputSchema.additionalProperties, false, `${t.name}: its schema must refuse unknown fields`)
}

/** A tool's result; structuredContent, or the JSON its text holds. */
async function call(name, args, opts) {
  const res = await client.callTool({ name, arguments: args }, undefined, opts)
  return res
}
function data(res) {
  return res.structuredContent ?? JSON.parse(res.content[0].text)
}
function text(res) {
  return res.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n')
}
async function ok(name, args, opts) {
  const res = await call(name, args, opts)
  assert.ok(!res.isError, `${name} failed: ${text(res)}`)
  return res
}
async function toolError(name, args, mustSay) {
  const res = await call(name, args)
  assert.equal(res.isError, true, `${name}(${JSON.stringify(args)}) should fail, got ${text(res)}`)
  assert.match(text(res), mustSay)
  step(`${name} refused as it should: ${text(res)}`)
  return res
}

// a sandbox
const created = data(await ok('create_sandbox', { template, timeout_s: 900, metadata: { by: 'mcp-test' } }))
const id = created.sandbox_id
step(`created ${id}: ${JSON.stringify(created)}`)
assert.match(id, /^sbx-/)
assert.equal(created.state, 'running')
assert.ok(created.expires_at, 'a sandbox made through MCP has a lifetime')

// the command of the issue: 42
const six = await ok('run_command', { sandbox_id: id, command: "python3 -c 'print(6*7)'" })
step(`run_command: ${JSON.stringify(text(six))}`)
assert.match(text(six), /^42\n/)
assert.equal(data(six).exit_code ?? 0, 0)

// output as progress notifications, before the result. The command pauses
// after its last line: the SDK's client runs a notification's handler a
// microtask later but a response's at once, so a progress notification that
// reaches it in the same read as the response (stdio) finds its handler gone
const progress = []
const streamed = await ok('run_command',
  { sandbox_id: id, command: 'for i in 1 2 3; do echo line$i; sleep 0.3; done; echo oops >&2; sleep 0.3; exit 3' },
  { onprogress: (p) => progress.push({ at: Date.now(), message: p.message, progress: p.progress }) })
const doneAt = Date.now()
step(`progress: ${JSON.stringify(progress.map((p) => p.message))}`)
const heard = progress.map((p) => p.message).join('')
for (const l of ['line1', 'line2', 'line3', 'oops']) assert.ok(heard.includes(l), `no progress with ${l}`)
assert.ok(progress.length >= 2 && progress[0].at < doneAt, 'progress came before the result')
for (let i = 1; i < progress.length; i++) assert.ok(progress[i].progress > progress[i - 1].progress)
assert.match(text(streamed), /line1\nline2\nline3\n--- stderr ---\noops\n\[exit code 3\]/)

// stdin, env, cwd
const piped = await ok('run_command',
  { sandbox_id: id, command: 'cat; echo " $GREETING from $(pwd)"', stdin: 'hi', env: { GREETING: 'hello' }, cwd: '/tmp' })
assert.match(text(piped), /^hi hello from \/tmp\n/)

// files
const body = 'notes from the agent\nwith ünïcode\n'
await ok('write_file', { sandbox_id: id, path: '/root/work/notes.txt', content: body })
const back = await ok('read_file', { sandbox_id: id, path: '/root/work/notes.txt' })
assert.equal(text(back), body)
await ok('write_file', { sandbox_id: id, path: '/root/work/run.sh', content: '#!/bin/sh\necho ran\n', executable: true })
assert.match(text(await ok('run_command', { sandbox_id: id, command: '/root/work/run.sh' })), /^ran\n/)
const bin = Buffer.from([0, 1, 2, 255, 254]).toString('base64')
await ok('write_file', { sandbox_id: id, path: '/root/work/bin', content: bin, encoding: 'base64' })
assert.equal(data(await ok('read_file', { sandbox_id: id, path: '/root/work/bin', encoding: 'base64' })).content, bin)
await toolError('read_file', { sandbox_id: id, path: '/root/work/bin' }, /not UTF-8 text .*base64/)
const listing = data(await ok('list_files', { sandbox_id: id, path: '/root/work' }))
assert.deepEqual(listing.entries.map((e) => e.name).sort(), ['bin', 'notes.txt', 'run.sh'])
step('files written, read and listed')

// bad input: each refused naming what was wrong, beside its control above
await toolError('run_command', { sandbox_id: id, command: 'true', bogus: 1 }, /unknown argument "bogus" \(this tool takes: sandbox_id, command/)
await toolError('run_command', { sandbox_id: id }, /missing required argument "command"/)
await toolError('run_command', { sandbox_id: id, command: 'true', timeout_s: 'soon' }, /"timeout_s" must be an integer/)
await toolError('create_sandbox', { template, on_timeout: 'explode' }, /"on_timeout" must be one of "suspend", "delete"/)
await toolError('run_command', { sandbox_id: 'sbx-00000000000000ff', command: 'true' }, /not found.*list_sandboxes/)
await toolError('read_file', { sandbox_id: id, path: 'relative.txt' }, /path: .*absolute/)
await toolError('read_file', { sandbox_id: id, path: '/root/nope' }, /read_file failed/)
await toolError('run_code', { sandbox_id: id, code: '1+1' }, /no code interpreter.*code-interpreter/)
try {
  await client.callTool({ name: 'no_such_tool', arguments: {} })
  assert.fail('an unknown tool must be a protocol error')
} catch (err) {
  assert.ok(err instanceof McpError && err.code === -32602, `unknown tool: ${err}`)
  step(`unknown tool: ${err.message}`)
}

// a timeout kills the command and says so
const slow = await call('run_command', { sandbox_id: id, command: 'echo started; sleep 60', timeout_s: 1 })
assert.equal(slow.isError, true)
assert.match(text(slow), /started\n\[killed after timeout_s=1/)
assert.equal(data(slow).timed_out, true)

// a cancelled call: the client gives up, the command is killed
const ac = new AbortController()
const pending = call('run_command', { sandbox_id: id, command: 'sleep 120 # marker-cancel' }, { signal: ac.signal })
await new Promise((r) => setTimeout(r, 1500))
ac.abort('the agent changed its mind')
await assert.rejects(pending)
let left = ''
for (let i = 0; i < 40; i++) {
  left = text(await ok('run_command', { sandbox_id: id, command: 'ps -eo args | grep -c "[m]arker-cancel" || true' }))
  if (left.startsWith('0\n')) break
  await new Promise((r) => setTimeout(r, 250))
}
assert.match(left, /^0\n/, 'the cancelled command still runs')
step('a cancelled call killed its command')

// the rest of the lifecycle
const port = data(await ok('get_port_url', { sandbox_id: id, port: 8000 }))
assert.ok(port.url.endsWith(`/v1/sandboxes/${id}/ports/8000/`), port.url)
const listed = data(await ok('list_sandboxes', {})).sandboxes
assert.ok(listed.some((s) => s.sandbox_id === id && s.metadata?.by === 'mcp-test'), JSON.stringify(listed))
await ok('delete_sandbox', { sandbox_id: id })
const after = data(await ok('list_sandboxes', {})).sandboxes
assert.ok(!after.some((s) => s.sandbox_id === id), 'deleted, yet listed')
await toolError('run_command', { sandbox_id: id, command: 'true' }, /not found/)
step('deleted')

await client.close()
console.log(`RESULT ${JSON.stringify({ transport: transportKind, tools: names, progress: progress.length })}`)
