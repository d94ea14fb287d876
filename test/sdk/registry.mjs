// A read-only, in-memory OCI registry on 127.0.0.1 for the fromImage tests:
// the Node counterpart of internal/template/oci/ocitest.Registry. It serves
// the images it is given (one gzipped layer each) by tag and by digest, the
// way `agent-sandbox serve` pulls them (distribution spec: GET /v2/, then
// manifests and blobs), and counts the requests it gets so that a test can
// tell a refused pull (no request at all) from a failed one.

import { createHash } from 'node:crypto'
import { createServer } from 'node:http'
import { gzipSync } from 'node:zlib'

const MANIFEST_TYPE = 'application/vnd.oci.image.manifest.v1+json'
const CONFIG_TYPE = 'application/vnd.oci.image.config.v1+json'
const LAYER_TYPE = 'application/vnd.oci.image.layer.v1.tar+gzip'

const sha256 = (buf) => 'sha256:' + createHash('sha256').update(buf).digest('hex')

/** One 512-byte ustar header. */
function tarHeader(name, { size = 0, type = '0', mode = 0o644 } = {}) {
  const h = Buffer.alloc(512)
  const put = (s, off, len) => h.write(s, off, len, 'utf8')
  const octal = (n, len) => n.toString(8).padStart(len - 1, '0') + '\0'
  put(name, 0, 100)
  put(octal(mode, 8), 100, 8)
  put(octal(0, 8), 108, 8) // uid
  put(octal(0, 8), 116, 8) // gid
  put(octal(size, 12), 124, 12)
  put(octal(0, 12), 136, 12) // mtime
  put('        ', 148, 8) // checksum field counts as spaces
  put(type, 156, 1)
  put('ustar\0', 257, 6)
  put('00', 263, 2)
  let sum = 0
  for (const b of h) sum += b
  put(sum.toString(8).padStart(6, '0') + '\0 ', 148, 8)
  return h
}

/** A tar of files ({ 'etc/passwd': 'text', 'data/': null for a directory }). */
export function tarOf(files) {
  const parts = []
  for (const [name, content] of Object.entries(files)) {
    if (content === null) {
      parts.push(tarHeader(name.endsWith('/') ? name : name + '/', { type: '5', mode: 0o755 }))
      continue
    }
    const data = Buffer.from(content)
    parts.push(tarHeader(name, { size: data.length }), data, Buffer.alloc((512 - (data.length % 512)) % 512))
  }
  parts.push(Buffer.alloc(1024))
  return Buffer.concat(parts)
}

/** A linux/amd64 image of one layer holding files, as a registry stores it. */
export function imageOf(files, config = {}) {
  const tar = tarOf(files)
  const layer = gzipSync(tar)
  const cfg = Buffer.from(
    JSON.stringify({
      architecture: 'amd64',
      os: 'linux',
      config,
      rootfs: { type: 'layers', diff_ids: [sha256(tar)] },
    })
  )
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: MANIFEST_TYPE,
      config: { mediaType: CONFIG_TYPE, digest: sha256(cfg), size: cfg.length },
      layers: [{ mediaType: LAYER_TYPE, digest: sha256(layer), size: layer.length }],
    })
  )
  return { manifest, blobs: new Map([[sha256(cfg), cfg], [sha256(layer), layer]]) }
}

/**
 * Serves images ({ 'name:tag': imageOf(...) }) on 127.0.0.1. Resolves
 * { host: '127.0.0.1:<port>', requests(), close() }; requests() is how many
 * requests it has answered.
 */
export function startRegistry(images) {
  const manifests = new Map()
  const blobs = new Map()
  for (const [ref, img] of Object.entries(images)) {
    const [name, tag] = ref.split(':')
    manifests.set(`${name}:${tag}`, img.manifest)
    manifests.set(`${name}:${sha256(img.manifest)}`, img.manifest)
    for (const [d, b] of img.blobs) blobs.set(`${name}@${d}`, b)
  }
  let count = 0
  const srv = createServer((req, res) => {
    count++
    const send = (status, body, type) => {
      res.writeHead(status, { 'Content-Type': type, 'Content-Length': body.length, ...(status === 200 ? { 'Docker-Content-Digest': sha256(body) } : {}) })
      res.end(req.method === 'HEAD' ? undefined : body)
    }
    const notFound = () => send(404, Buffer.from(JSON.stringify({ errors: [{ code: 'NOT_FOUND', message: req.url }] })), 'application/json')
    if (req.method !== 'GET' && req.method !== 'HEAD') return send(405, Buffer.alloc(0), 'text/plain')
    if (req.url === '/v2/' || req.url === '/v2') return send(200, Buffer.from('{}'), 'application/json')
    let m = /^\/v2\/(.+)\/manifests\/([^/]+)$/.exec(req.url)
    if (m) {
      const body = manifests.get(`${m[1]}:${m[2]}`)
      return body ? send(200, body, MANIFEST_TYPE) : notFound()
    }
    m = /^\/v2\/(.+)\/blobs\/([^/]+)$/.exec(req.url)
    if (m) {
      const body = blobs.get(`${m[1]}@${m[2]}`)
      return body ? send(200, body, 'application/octet-stream') : notFound()
    }
    notFound()
  })
  return new Promise((resolve, reject) => {
    srv.on('error', reject)
    srv.listen(0, '127.0.0.1', () => {
      resolve({
        host: `127.0.0.1:${srv.address().port}`,
        requests: () => count,
        close: () => new Promise((r) => srv.close(r)),
      })
    })
  })
}

/** The image both fromImage tests pull: a file to find, and a passwd for its default user. */
export const TEST_IMAGE_FILES = {
  'etc/': null,
  'etc/passwd': 'root:x:0:0:root:/root:/bin/sh\n',
  'root/': null,
  'hello.txt': 'hello from the test registry\n',
}
