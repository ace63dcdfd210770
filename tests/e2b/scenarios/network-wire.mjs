// The E2B network options on the wire, against the test internet
// (tests/netlab.py): a sandbox made with allowInternetAccess: false reaches
// nothing; one with network {denyOut: [ALL_TRAFFIC], allowOut: ['a.test']}
// reaches a.test and not e.test (the evil host); the control, a sandbox
// with no options, reaches both. Each sandbox runs the same two fetches;
// RESULT has their outputs and ids (the test reads what the test internet
// saw and the sandboxes' network logs, then deletes them).
import { ALL_TRAFFIC, Sandbox } from 'e2b'
import { scenario, step, result, runTag } from './lib.mjs'

// E2B's default template is Debian's: curl, one try each
const FETCH = 'for u in http://a.test/hello.txt http://e.test/x; do curl -sS --max-time 5 $u 2>&1; echo "rc=$?"; done'

await scenario('network-wire', async (cleanups) => {
  const metadata = { suite: runTag }
  const made = {
    denyAll: await Sandbox.create({ metadata, allowInternetAccess: false }),
    allowlist: await Sandbox.create({ metadata, network: { denyOut: [ALL_TRAFFIC], allowOut: ['a.test'] } }),
    open: await Sandbox.create({ metadata }),
  }
  cleanups.push(...Object.values(made))
  const out = {}
  for (const [k, sbx] of Object.entries(made)) {
    const r = await sbx.commands.run(`sh -c '${FETCH}'`)
    out[k] = r.stdout
    step(`${k} (${sbx.sandboxId}): ${JSON.stringify(r.stdout)}`)
  }
  result({ out, ids: Object.fromEntries(Object.entries(made).map(([k, s]) => [k, s.sandboxId])) })
  cleanups.length = 0 // the test reads their network logs, then kills them
})
