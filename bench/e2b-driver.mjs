// bench/e2b.py's client: the public e2b SDK, configured by E2B_API_URL,
// E2B_SANDBOX_URL and E2B_API_KEY only. Prints one JSON line of timings.
//   e2b-driver.mjs create TEMPLATE   Sandbox.create() + commands.run('true'), then kill
//   e2b-driver.mjs rtt TEMPLATE N    N commands.run('true') on one sandbox
import { Sandbox } from 'e2b'

const [mode, template, n] = process.argv.slice(2)
const now = () => Number(process.hrtime.bigint()) / 1e6
if (mode === 'create') {
  const t0 = now()
  const sbx = await Sandbox.create(template)
  const t1 = now()
  await sbx.commands.run('true')
  const t2 = now()
  await sbx.kill()
  console.log(JSON.stringify({ create_ms: t1 - t0, first_run_ms: t2 - t1, total_ms: t2 - t0 }))
} else if (mode === 'rtt') {
  const sbx = await Sandbox.create(template)
  await sbx.commands.run('true') // warm: the first run pays for bash's pages
  const rtt = []
  for (let i = 0; i < Number(n); i++) {
    const t = now()
    await sbx.commands.run('true')
    rtt.push(now() - t)
  }
  await sbx.kill()
  console.log(JSON.stringify({ rtt_ms: rtt }))
} else {
  console.error('usage: e2b-driver.mjs create TEMPLATE | rtt TEMPLATE N')
  process.exit(2)
}
