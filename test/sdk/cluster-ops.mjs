#!/usr/bin/env node
// Official E2B SDK operations against a cluster's API replica, for
// test/cluster's TestSDKOnCluster, which points E2B_API_URL,
// E2B_SANDBOX_URL, E2B_DOMAIN and E2B_API_KEY at one replica (header
// routing) and reads what this prints: one JSON line per sandbox.
//
//   node cluster-ops.mjs create N     Sandbox.create, commands.run, files.write and files.read
//                                     (and envd's /proc/self/uid_map), N times
//   node cluster-ops.mjs connect ID…  Sandbox.connect, commands.run, files.read of create's file
//   node cluster-ops.mjs kill ID…     Sandbox.kill
//   node cluster-ops.mjs loop SECONDS Sandbox.create, then commands.run, files.write and files.read
//                                     over and over for SECONDS, each retried once on an error
//                                     (printed, counted), then Sandbox.kill; prints a line once
//                                     the sandbox runs, and one at the end
//
// Any failure throws, so the exit status is not 0.

import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'

const FILE = '/home/user/cluster-ops.txt'

async function create(n) {
  for (let i = 0; i < n; i++) {
    const t0 = performance.now()
    const sbx = await Sandbox.create({ timeoutMs: 5 * 60_000, metadata: { clusterOps: String(i) } })
    const ms = Math.round(performance.now() - t0)
    const run = await sbx.commands.run('echo ran as $(id -un) in $(hostname)')
    assert.equal(run.exitCode, 0)
    const uidMap = (await sbx.files.read('/proc/self/uid_map')).trim().split(/\s+/).join(' ')
    await sbx.files.write(FILE, `written to ${sbx.sandboxId}`)
    assert.equal(await sbx.files.read(FILE), `written to ${sbx.sandboxId}`)
    console.log(JSON.stringify({ id: sbx.sandboxId, createMs: ms, stdout: run.stdout.trim(), uidMap }))
  }
}

async function connect(ids) {
  for (const id of ids) {
    const sbx = await Sandbox.connect(id)
    const run = await sbx.commands.run('cat ' + FILE)
    assert.equal(run.stdout, `written to ${id}`)
    assert.equal(await sbx.files.read(FILE), `written to ${id}`)
    console.log(JSON.stringify({ id, stdout: run.stdout.trim() }))
  }
}

async function kill(ids) {
  for (const id of ids) {
    assert.equal(await Sandbox.kill(id), true, `Sandbox.kill(${id})`)
    console.log(JSON.stringify({ id, killed: true }))
  }
}

/** Runs fn, and once more if it fails; retries lists the first failures. */
async function retried(what, fn, retries) {
  try {
    return await fn()
  } catch (err) {
    retries.push(`${what}: ${err.message}`)
    console.error(`retrying ${what} after: ${err.message}`)
    return await fn()
  }
}

async function loop(seconds) {
  const retries = []
  const sbx = await retried('create', () => Sandbox.create({ timeoutMs: 5 * 60_000 }), retries)
  console.log(JSON.stringify({ id: sbx.sandboxId, started: true }))
  let ops = 0
  for (const end = Date.now() + seconds * 1000; Date.now() < end; ops++) {
    const run = await retried(`commands.run #${ops}`, () => sbx.commands.run(`echo ${ops}`), retries)
    assert.equal(run.stdout, `${ops}\n`)
    await retried(`files.write #${ops}`, () => sbx.files.write(FILE, String(ops)), retries)
    assert.equal(await retried(`files.read #${ops}`, () => sbx.files.read(FILE), retries), String(ops))
  }
  assert.equal(await retried('kill', () => Sandbox.kill(sbx.sandboxId), retries), true)
  console.log(JSON.stringify({ id: sbx.sandboxId, ops, retries }))
}

const [op, ...args] = process.argv.slice(2)
const ops = { create: () => create(Number(args[0])), connect: () => connect(args), kill: () => kill(args), loop: () => loop(Number(args[0])) }
if (!ops[op]) throw new Error(`unknown operation ${op}: create N, connect ID…, kill ID…, loop SECONDS`)
await ops[op]()
