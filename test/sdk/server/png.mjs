// Reading screenshots: enough of PNG to tell a picture from a blank screen.

import assert from 'node:assert/strict'
import { inflateSync } from 'node:zlib'

/**
 * Decodes an 8-bit RGB or RGBA, non-interlaced PNG (what ffmpeg writes) into
 * { width, height, channels, pixels }: enough to measure what it shows.
 */
function decodePng(buf) {
  assert.equal(buf.subarray(0, 8).toString('hex'), '89504e470d0a1a0a', 'not a PNG')
  let off = 8
  let ihdr
  const idat = []
  while (off < buf.length) {
    const len = buf.readUInt32BE(off)
    const type = buf.subarray(off + 4, off + 8).toString('latin1')
    const data = buf.subarray(off + 8, off + 8 + len)
    if (type === 'IHDR') ihdr = data
    if (type === 'IDAT') idat.push(data)
    off += 12 + len
  }
  const width = ihdr.readUInt32BE(0)
  const height = ihdr.readUInt32BE(4)
  const [depth, colorType, , , interlace] = ihdr.subarray(8)
  assert.equal(depth, 8, 'bit depth')
  assert.equal(interlace, 0, 'interlaced')
  const channels = { 2: 3, 6: 4 }[colorType]
  assert.ok(channels, `color type ${colorType}`)
  const raw = inflateSync(Buffer.concat(idat))
  const stride = width * channels
  const pixels = Buffer.alloc(stride * height)
  for (let y = 0; y < height; y++) {
    const filter = raw[y * (stride + 1)]
    const line = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1))
    for (let x = 0; x < stride; x++) {
      const a = x >= channels ? pixels[y * stride + x - channels] : 0
      const b = y > 0 ? pixels[(y - 1) * stride + x] : 0
      const c = x >= channels && y > 0 ? pixels[(y - 1) * stride + x - channels] : 0
      const p = a + b - c
      const pa = Math.abs(p - a)
      const pb = Math.abs(p - b)
      const pc = Math.abs(p - c)
      const paeth = pa <= pb && pa <= pc ? a : pb <= pc ? b : c
      const pred = [0, a, b, (a + b) >> 1, paeth][filter]
      assert.ok(pred !== undefined, `filter ${filter}`)
      pixels[y * stride + x] = (line[x] + pred) & 0xff
    }
  }
  return { width, height, channels, pixels }
}

/**
 * The luma variance of png's pixels, with its size: near 0 for a blank
 * (one-colour) screen, in the hundreds for a desktop with windows on it.
 */
export function lumaVariance(png) {
  const img = decodePng(png)
  let sum = 0
  let sumSq = 0
  const n = img.width * img.height
  for (let i = 0; i < n; i++) {
    const o = i * img.channels
    const luma = 0.299 * img.pixels[o] + 0.587 * img.pixels[o + 1] + 0.114 * img.pixels[o + 2]
    sum += luma
    sumSq += luma * luma
  }
  return { width: img.width, height: img.height, variance: sumSq / n - (sum / n) ** 2 }
}

/**
 * The share of png's pixels within tolerance (per channel) of the colour
 * rgb ([r, g, b]): how much of the screen a window of that colour covers.
 */
export function colorShare(png, [r, g, b], tolerance = 8) {
  const img = decodePng(png)
  const n = img.width * img.height
  let hits = 0
  for (let i = 0; i < n; i++) {
    const o = i * img.channels
    const p = img.pixels
    if (Math.abs(p[o] - r) <= tolerance && Math.abs(p[o + 1] - g) <= tolerance && Math.abs(p[o + 2] - b) <= tolerance) hits++
  }
  return hits / n
}
