#!/usr/bin/env node
// Benchmarks envd through the official E2B SDK (not part of the pass/fail run):
//   - commands.run('true') round trip, p50/p99 over 200 runs after 10 warm-ups
//   - 100 MB upload (files.write) and download (files.read bytes / stream) throughput
//
// Usage: node test/sdk/bench.mjs      (needs bin/envd, see README.md)

import { createHash, randomBytes } from 'node:crypto'
import { performance } from 'node:perf_hooks'
import { Sandbox } from 'e2b'

import { DEFAULT_HOME, startEnvdPair } from './envd-process.mjs'

const WARMUP = 10
const RUNS = 200
const SIZE = 100 * 1024 * 1024 // 100 MB (MiB); throughput below uses the same unit
const MB = 1024 * 1024
const DOWNLOAD_CAP_MS = Number(process.env.BENCH_DOWNLOAD_CAP_MS ?? 120_000)

function percentile(sorted, p) {
  const i = Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)
  return sorted[Math.max(0, i)]
}

async function timed(fn) {
  const t0 = performance.now()
  const v = await fn()
  return [performance.now() - t0, v]
}

/** Prints label + the figure fn returns, or that it did not finish within capMs. */
async function report(label, capMs, fn) {
  try {
    console.log(label + (await fn()))
  } catch (err) {
    const timedOut = err?.name === 'TimeoutError' || /timed? ?out|aborted/i.test(String(err?.message))
    console.log(label + (timedOut ? `did not finish within ${capMs / 1000} s (< ${(SIZE / MB / (capMs / 1000)).toFixed(1)} MB/s)` : `failed: ${err}`))
  }
}

const sha = (b) => createHash('sha256').update(b).digest('hex')

async function bench(sbx) {
  for (let i = 0; i < WARMUP; i++) await sbx.commands.run('true')
  const lat = []
  for (let i = 0; i < RUNS; i++) {
    const [ms] = await timed(() => sbx.commands.run('true'))
    lat.push(ms)
  }
  lat.sort((a, b) => a - b)
  console.log(
    `commands.run('true') round trip over ${RUNS} runs: p50 ${percentile(lat, 50).toFixed(2)} ms, ` +
      `p99 ${percentile(lat, 99).toFixed(2)} ms (min ${lat[0].toFixed(2)}, max ${lat.at(-1).toFixed(2)})`
  )

  const data = randomBytes(SIZE)
  const want = sha(data)
  const path = `${DEFAULT_HOME}/bench-${process.pid}.bin`
  const rate = (ms) => `${(SIZE / MB / (ms / 1000)).toFixed(1)} MB/s (${(ms / 1000).toFixed(2)} s)`
  try {
    const [upMs] = await timed(() => sbx.files.write(path, new Blob([data])))
    console.log(`upload 100 MB, files.write(Blob), multipart:       ${rate(upMs)}`)
    const [upOctMs] = await timed(() => sbx.files.write(path, new Blob([data]), { useOctetStream: true }))
    console.log(`upload 100 MB, files.write(Blob), octet-stream:    ${rate(upOctMs)}`)

    // Downloads are capped: Node's fetch always advertises gzip, envd then
    // gzips the body, and undici's decompression of a large gzip body is
    // slow (superlinear), so an uncapped run can take minutes.
    const capMs = DOWNLOAD_CAP_MS
    await report(`download 100 MB, files.read(format: 'bytes'):      `, capMs, async () => {
      const [ms, bytes] = await timed(() => sbx.files.read(path, { format: 'bytes', requestTimeoutMs: capMs }))
      if (bytes.length !== SIZE || sha(bytes) !== want) throw new Error('downloaded bytes differ from uploaded ones')
      return rate(ms)
    })
    await report(`download 100 MB, files.read(format: 'stream'):     `, capMs, async () => {
      const [ms, n] = await timed(async () => {
        const stream = await sbx.files.read(path, { format: 'stream', requestTimeoutMs: capMs })
        const deadline = performance.now() + capMs
        let total = 0
        for await (const chunk of stream) {
          total += chunk.length
          // Checked per chunk: a busy event loop can starve an abort timer.
          if (performance.now() > deadline) throw Object.assign(new Error('cap reached'), { name: 'TimeoutError' })
        }
        return total
      })
      if (n !== SIZE) throw new Error(`stream read ${n} bytes, want ${SIZE}`)
      return rate(ms)
    })
  } finally {
    await sbx.files.remove(path).catch(() => {})
  }
}

async function main() {
  const pair = await startEnvdPair()
  try {
    console.log(`envd ${pair.version} at ${pair.main.url} (pid ${pair.main.pid})`)
    const sbx = new Sandbox({ sandboxId: 'debug_sandbox_id', envdVersion: pair.version, debug: true })
    await bench(sbx)
  } finally {
    await pair.stop()
  }
}

try {
  await main()
} catch (err) {
  console.error(`bench failed: ${err.stack ?? err}`)
  process.exitCode = 1
}
