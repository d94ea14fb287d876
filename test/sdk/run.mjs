#!/usr/bin/env node
// Runs the envd conformance suite: starts envd (twice: a debug instance on
// 127.0.0.1:49983 and an access-token instance on 127.0.0.1:49984), runs
// envd/*.test.mjs with node:test against them through the official E2B SDK,
// and prints "N passed, M failed[, K skipped]". Exit status is 1 when any
// test failed.
//
// Usage: node test/sdk/run.mjs [area ...]   e.g. `node test/sdk/run.mjs files watch`

import { readdirSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { basename, dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { run } from 'node:test'
import { spec } from 'node:test/reporters'

import { startEnvdPair } from './envd-process.mjs'

const TEST_DIR = join(dirname(fileURLToPath(import.meta.url)), 'envd')
const PER_TEST_TIMEOUT_MS = 60_000

function testFiles(areas) {
  const all = readdirSync(TEST_DIR)
    .filter((f) => f.endsWith('.test.mjs'))
    .sort()
  if (areas.length === 0) return all.map((f) => join(TEST_DIR, f))
  return areas.map((a) => {
    const f = all.find((name) => name === `${a}.test.mjs` || name === basename(a))
    if (!f) throw new Error(`no test file for '${a}'; have: ${all.join(', ')}`)
    return join(TEST_DIR, f)
  })
}

/** Environment for the test processes: only what this runner decides. */
function applyTestEnv(env) {
  for (const k of Object.keys(process.env)) {
    if (k.startsWith('E2B_')) delete process.env[k]
  }
  Object.assign(process.env, env)
}

function runTests(files) {
  return new Promise((resolve, reject) => {
    const counts = { passed: 0, failed: 0, skipped: 0 }
    const failures = []
    const stream = run({ files, concurrency: 1, timeout: PER_TEST_TIMEOUT_MS })

    // Count leaf tests only; a suite's own pass/fail is the sum of its tests.
    // A file that fails to load reports as one failed test named after it.
    stream.on('test:pass', (t) => {
      if (t.details?.type === 'suite') return
      if (t.skip || t.todo) counts.skipped++
      else counts.passed++
    })
    stream.on('test:fail', (t) => {
      if (t.details?.type === 'suite') return
      counts.failed++
      failures.push(`${basename(t.file ?? '?')}: ${t.name}: ${t.details?.error?.cause?.message ?? t.details?.error?.message}`)
    })

    const out = stream.compose(new spec())
    out.on('data', (chunk) => process.stdout.write(chunk))
    out.on('error', reject)
    out.on('end', () => resolve({ counts, failures }))
  })
}

async function main() {
  const files = testFiles(process.argv.slice(2))

  let pair
  try {
    pair = await startEnvdPair()
  } catch (err) {
    console.error(`setup failed: ${err.message}`)
    return 2
  }

  let result
  try {
    console.log(
      `envd ${pair.version} (${pair.versionSource}); debug instance ${pair.main.url} pid ${pair.main.pid}, ` +
        `token instance ${pair.token.url} pid ${pair.token.pid}`
    )
    applyTestEnv(pair.env)
    result = await runTests(files)
  } finally {
    await pair.stop()
    for (const [name, inst] of [['main', pair.main], ['token', pair.token]]) {
      const path = join(tmpdir(), `envd-sdk-${name}.log`)
      writeFileSync(path, inst.output())
      if (result?.counts.failed) console.log(`envd ${name} output (last 64 KiB): ${path}`)
    }
  }

  const { counts, failures } = result
  if (failures.length) {
    console.log('\nfailed tests:')
    for (const f of failures) console.log(`  - ${f}`)
    console.log('')
  }
  let line = `${counts.passed} passed, ${counts.failed} failed`
  if (counts.skipped) line += `, ${counts.skipped} skipped`
  console.log(line)
  return counts.failed > 0 ? 1 : 0
}

process.exitCode = await main()
