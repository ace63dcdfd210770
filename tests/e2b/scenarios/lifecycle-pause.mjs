// Needs envd: lifecycle {onTimeout: 'pause'}: at its timeout the sandbox is
// paused, not killed (getInfo says 'paused'), and Sandbox.connect brings it
// back, running, with its files and its lifecycle.
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { scenario, step, runTag, until } from './lib.mjs'

await scenario('paused at its timeout', async (cleanups) => {
  const sbx = await Sandbox.create({ timeoutMs: 5000, lifecycle: { onTimeout: 'pause' } })
  cleanups.push(sbx)
  const t0 = Date.now()
  step(`created ${sbx.sandboxId}`)
  const info0 = await sbx.getInfo()
  assert.equal(info0.lifecycle?.onTimeout, 'pause', `lifecycle: ${JSON.stringify(info0.lifecycle)}`)
  await sbx.files.write('/root/kept.txt', `${runTag}\n`)
  const paused = await until(async () => {
    const info = await sbx.getInfo()
    return info.state === 'paused' ? info : null
  }, 60_000, 'state paused after the timeout', 500)
  step(`paused ${((Date.now() - t0) / 1000).toFixed(1)} s after the create: ${JSON.stringify(paused)}`)
  assert.ok(Date.now() - t0 >= 4000, 'paused before its timeout')
  // what an app does when it finds its sandbox paused
  const back = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 300_000 })
  assert.equal(back.sandboxId, sbx.sandboxId)
  const info = await back.getInfo()
  step(`connected: ${JSON.stringify(info)}`)
  assert.equal(info.state, 'running')
  assert.ok(info.endAt.getTime() > Date.now() + 200_000, `endAt ${info.endAt.toISOString()} is not the new timeout`)
  assert.equal(info.lifecycle?.onTimeout, 'pause', 'lifecycle after connect')
  assert.equal(await back.files.read('/root/kept.txt'), `${runTag}\n`, 'the file written before the pause')
  assert.equal((await back.commands.run('cat /root/kept.txt')).stdout, `${runTag}\n`)
  assert.equal(paused.lifecycle?.onTimeout, 'pause', `lifecycle while paused: ${JSON.stringify(paused.lifecycle)}`)
})
