// A WebSocket server inside a sandbox, reached through getHost(port): the
// router proxies the HTTP/1.1 Upgrade and then the raw frames both ways.
// Header mode: ws over http://<port>-<id>.localhost:<server port>; TLS mode:
// wss over https://<port>-<id>.sandbox.test:<server port> (the runner's DNS
// preload patches dns.lookup, which node:http(s) use, and NODE_EXTRA_CA_CERTS
// makes node:https trust the server's CA).
//
// The base template has python3 with the standard library only and Node 18
// (no WebSocket server), so the sandbox side is a small RFC 6455 echo server
// in Python; Node 20 has no WebSocket client, so the client here is a small
// one on node:http(s) `request` + the 'upgrade' event.

import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import { request as httpRequest } from 'node:http'
import { request as httpsRequest } from 'node:https'

import { createSandbox, hostUrl, killCreated, mode, sleep } from './helpers.mjs'

const WS_PORT = 8765
const WS_GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11'
const SERVER_PATH = '/tmp/ws_echo.py'

// RFC 6455 echo server, Python standard library only. Echoes text/binary
// frames (FIN bit and opcode kept, so fragments echo as fragments) unmasked,
// answers ping with pong and close with close. The first text message "host?"
// is answered with the Host header the upgrade request arrived with.
const ECHO_SERVER = String.raw`
import base64, hashlib, socket, struct, sys, threading

GUID = b'${WS_GUID}'

def send_frame(c, first_byte, payload):
    n = len(payload)
    if n < 126:
        head = struct.pack('!BB', first_byte, n)
    elif n < 65536:
        head = struct.pack('!BBH', first_byte, 126, n)
    else:
        head = struct.pack('!BBQ', first_byte, 127, n)
    c.sendall(head + payload)

def handle(c):
    try:
        buf = b''
        while b'\r\n\r\n' not in buf:
            chunk = c.recv(4096)
            if not chunk:
                return
            buf += chunk
        head, pending = buf.split(b'\r\n\r\n', 1)
        lines = head.decode('latin-1').split('\r\n')
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(':')
            headers[k.strip().lower()] = v.strip()
        key = headers.get('sec-websocket-key', '')
        if not key or headers.get('upgrade', '').lower() != 'websocket':
            body = b'not a websocket request\n'
            c.sendall(b'HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n' % len(body) + body)
            return
        accept = base64.b64encode(hashlib.sha1(key.encode() + GUID).digest())
        c.sendall(b'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ' + accept + b'\r\n\r\n')

        def read(n):
            nonlocal pending
            while len(pending) < n:
                chunk = c.recv(65536)
                if not chunk:
                    raise EOFError
                pending += chunk
            out, pending = pending[:n], pending[n:]
            return out

        while True:
            b0, b1 = read(2)
            opcode = b0 & 0x0F
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack('!H', read(2))[0]
            elif n == 127:
                n = struct.unpack('!Q', read(8))[0]
            mask = read(4) if b1 & 0x80 else b'\0\0\0\0'
            data = read(n)
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
            if opcode == 0x8:
                send_frame(c, 0x88, payload[:2])
                return
            if opcode == 0x9:
                send_frame(c, 0x8A, payload)
            elif opcode == 0x1 and payload == b'host?':
                send_frame(c, 0x81, headers.get('host', '').encode())
            elif opcode in (0x0, 0x1, 0x2):
                send_frame(c, b0 & 0x8F, payload)
    except (EOFError, OSError):
        pass
    finally:
        c.close()

def main():
    port = int(sys.argv[1])
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(('0.0.0.0', port))
    s.listen(64)
    while True:
        c, _ = s.accept()
        threading.Thread(target=handle, args=(c,), daemon=True).start()

main()
`

/** Uploads the echo server and starts it in the background on WS_PORT. */
async function startEchoServer(sbx) {
  await sbx.files.write(SERVER_PATH, ECHO_SERVER)
  await sbx.commands.run(`python3 ${SERVER_PATH} ${WS_PORT}`, { background: true })
}

/** One client frame: FIN set, masked with a random key (clients must mask). */
function encodeFrame(opcode, payload) {
  const n = payload.length
  let head
  if (n < 126) {
    head = Buffer.from([0x80 | opcode, 0x80 | n])
  } else if (n < 65536) {
    head = Buffer.alloc(4)
    head[0] = 0x80 | opcode
    head[1] = 0x80 | 126
    head.writeUInt16BE(n, 2)
  } else {
    head = Buffer.alloc(10)
    head[0] = 0x80 | opcode
    head[1] = 0x80 | 127
    head.writeBigUInt64BE(BigInt(n), 2)
  }
  const mask = randomBytes(4)
  const body = Buffer.alloc(n)
  for (let i = 0; i < n; i++) body[i] = payload[i] ^ mask[i & 3]
  return Buffer.concat([head, mask, body])
}

/**
 * A minimal WebSocket client over an upgraded socket: send() writes masked
 * frames, next() resolves with the next server frame {fin, opcode, payload,
 * masked}. Server frames must not be masked; masked records what came.
 */
class WsClient {
  constructor(socket, head) {
    this.socket = socket
    this.buf = head ?? Buffer.alloc(0)
    this.frames = []
    this.waiters = []
    this.error = null
    socket.on('data', (chunk) => {
      this.buf = Buffer.concat([this.buf, chunk])
      this.#parse()
    })
    const fail = (err) => {
      this.error ??= err
      for (const w of this.waiters.splice(0)) w.reject(this.error)
    }
    socket.on('error', fail)
    socket.on('close', () => fail(new Error('WebSocket connection closed')))
    this.#parse()
  }

  #parse() {
    for (;;) {
      const b = this.buf
      if (b.length < 2) return
      let n = b[1] & 0x7f
      let off = 2
      if (n === 126) {
        if (b.length < 4) return
        n = b.readUInt16BE(2)
        off = 4
      } else if (n === 127) {
        if (b.length < 10) return
        n = Number(b.readBigUInt64BE(2))
        off = 10
      }
      const masked = (b[1] & 0x80) !== 0
      if (masked) off += 4
      if (b.length < off + n) return
      let payload = Buffer.from(b.subarray(off, off + n))
      if (masked) {
        const mask = b.subarray(off - 4, off)
        for (let i = 0; i < n; i++) payload[i] ^= mask[i & 3]
      }
      this.buf = b.subarray(off + n)
      const frame = { fin: (b[0] & 0x80) !== 0, opcode: b[0] & 0x0f, payload, masked }
      const w = this.waiters.shift()
      if (w) w.resolve(frame)
      else this.frames.push(frame)
    }
  }

  send(opcode, payload) {
    this.socket.write(encodeFrame(opcode, Buffer.isBuffer(payload) ? payload : Buffer.from(payload)))
  }

  sendText(text) {
    this.send(0x1, text)
  }

  /** The next frame from the server (rejects after timeoutMs or when the connection ends). */
  next(timeoutMs = 5_000) {
    if (this.frames.length) return Promise.resolve(this.frames.shift())
    if (this.error) return Promise.reject(this.error)
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w.resolve !== done)
        reject(new Error(`no WebSocket frame within ${timeoutMs} ms`))
      }, timeoutMs)
      const done = (f) => {
        clearTimeout(timer)
        resolve(f)
      }
      this.waiters.push({
        resolve: done,
        reject: (e) => {
          clearTimeout(timer)
          reject(e)
        },
      })
    })
  }

  /** Sends text and returns the text of the next (unfragmented) frame. */
  async echo(text) {
    this.sendText(text)
    const f = await this.next()
    assert.equal(f.masked, false, 'server frames must not be masked')
    assert.equal(f.fin, true)
    assert.equal(f.opcode, 0x1, `expected a text frame, got opcode ${f.opcode}`)
    return f.payload.toString('utf8')
  }

  destroy() {
    this.socket.destroy()
  }
}

/**
 * Opens a WebSocket to url (http: or https:, the getHost form). Resolves with
 * { status: 101, ws } after checking Sec-WebSocket-Accept, or with
 * { status, headers, text, body } for any other answer (body = parsed JSON or null).
 */
function wsConnect(url, { headers = {}, timeoutMs = 5_000 } = {}) {
  const u = new URL(url)
  const request = u.protocol === 'https:' ? httpsRequest : httpRequest
  const key = randomBytes(16).toString('base64')
  const expectAccept = createHash('sha1').update(key + WS_GUID).digest('base64')
  return new Promise((resolve, reject) => {
    const req = request(u, {
      method: 'GET',
      headers: {
        Connection: 'Upgrade',
        Upgrade: 'websocket',
        'Sec-WebSocket-Version': '13',
        'Sec-WebSocket-Key': key,
        ...headers,
      },
      // A fresh connection each time: an upgraded socket leaves the pool anyway.
      agent: false,
      timeout: timeoutMs,
    })
    req.on('timeout', () => req.destroy(new Error(`no answer to the upgrade within ${timeoutMs} ms`)))
    req.on('error', reject)
    req.on('upgrade', (res, socket, head) => {
      socket.setTimeout(0)
      if (res.statusCode !== 101) {
        socket.destroy()
        return reject(new Error(`upgrade event with status ${res.statusCode}`))
      }
      const accept = res.headers['sec-websocket-accept']
      if (accept !== expectAccept) {
        socket.destroy()
        return reject(new Error(`Sec-WebSocket-Accept ${JSON.stringify(accept)}, want ${expectAccept}`))
      }
      if (String(res.headers.upgrade).toLowerCase() !== 'websocket') {
        socket.destroy()
        return reject(new Error(`Upgrade header ${JSON.stringify(res.headers.upgrade)}`))
      }
      resolve({ status: 101, ws: new WsClient(socket, head) })
    })
    req.on('response', (res) => {
      const chunks = []
      res.on('data', (c) => chunks.push(c))
      res.on('error', reject)
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8')
        let body = null
        try {
          body = JSON.parse(text)
        } catch {}
        resolve({ status: res.statusCode, headers: res.headers, text, body })
      })
    })
    req.end()
  })
}

/**
 * wsConnect until the upgrade succeeds or timeoutMs passes: the server in the
 * sandbox takes a moment to start (the router answers 502 until the port is
 * open). Returns the last result (or throws the last error).
 */
async function wsConnectUntilOpen(url, { headers, timeoutMs = 10_000, intervalMs = 250 } = {}) {
  const deadline = Date.now() + timeoutMs
  let last
  for (;;) {
    try {
      last = await wsConnect(url, { headers })
      if (last.status === 101) return last
    } catch (err) {
      last = err
    }
    if (Date.now() > deadline) {
      if (last instanceof Error) throw last
      return last
    }
    await sleep(intervalMs)
  }
}

/** Asserts an upgrade result is 101 and returns its client. */
function upgraded(r) {
  assert.equal(r.status, 101, `upgrade answered ${r.status}: ${r.text}`)
  return r.ws
}

const open = new Set()
/** Remembers a client so after() closes it (an open socket keeps the file's process alive). */
function keep(ws) {
  open.add(ws)
  return ws
}

after(async () => {
  for (const ws of open) ws.destroy()
  open.clear()
  await killCreated()
})

describe(`WebSocket through getHost(port) (${mode} mode)`, { timeout: 120_000 }, () => {
  let sbx
  let ws
  before(async () => {
    sbx = (await createSandbox()).sbx
    await startEchoServer(sbx)
    ws = keep(upgraded(await wsConnectUntilOpen(hostUrl(sbx, WS_PORT, '/echo'))))
  })

  test(`upgrade to ${WS_PORT}-<id> answers 101 with the right Sec-WebSocket-Accept`, () => {
    assert.ok(ws instanceof WsClient) // wsConnect checked 101, Upgrade and the accept key
  })

  test('the sandbox server sees the getHost Host header', async () => {
    assert.equal(await ws.echo('host?'), sbx.getHost(WS_PORT))
  })

  test('a short text message round-trips', async () => {
    assert.equal(await ws.echo('hello from the sdk test'), 'hello from the sdk test')
    assert.equal(await ws.echo('héllo ✓ 🌍'), 'héllo ✓ 🌍')
  })

  test('a 300-byte message (16-bit extended length) round-trips', async () => {
    const msg = 'x'.repeat(150) + randomBytes(75).toString('hex')
    assert.equal(Buffer.byteLength(msg), 300)
    assert.equal(await ws.echo(msg), msg)
  })

  test('a 100 KiB message (64-bit extended length) round-trips', async () => {
    const msg = randomBytes(50 * 1024).toString('hex')
    assert.equal(await ws.echo(msg), msg)
  })

  test('several messages in flight come back in order', async () => {
    const msgs = Array.from({ length: 20 }, (_, i) => `message ${i} ${'.'.repeat(i * 13)}`)
    for (const m of msgs) ws.sendText(m)
    for (const m of msgs) {
      const f = await ws.next()
      assert.equal(f.payload.toString('utf8'), m)
    }
  })

  test('two connections at once stay separate', async () => {
    const other = keep(upgraded(await wsConnect(hostUrl(sbx, WS_PORT, '/other'))))
    other.sendText('to-other')
    ws.sendText('to-first')
    assert.equal((await other.next()).payload.toString(), 'to-other')
    assert.equal((await ws.next()).payload.toString(), 'to-first')
    other.destroy()
  })

  test('an upgrade to a closed port → 502 JSON "port is not open"', async () => {
    const r = await wsConnect(hostUrl(sbx, WS_PORT + 1, '/echo'), { timeoutMs: 10_000 })
    if (r.ws) r.ws.destroy()
    assert.equal(r.status, 502, `expected 502, got ${r.status}: ${r.text}`)
    assert.equal(r.body?.code, 502)
    assert.equal(r.body?.sandboxId, sbx.sandboxId)
    assert.match(r.body?.message ?? '', /port is not open/)
  })

  test('ping → pong, close → close', async () => {
    ws.send(0x9, 'are you there')
    const pong = await ws.next()
    assert.equal(pong.opcode, 0xa)
    assert.equal(pong.payload.toString(), 'are you there')

    const code = Buffer.alloc(2)
    code.writeUInt16BE(1000)
    ws.send(0x8, code)
    const close = await ws.next()
    assert.equal(close.opcode, 0x8)
    assert.equal(close.payload.readUInt16BE(0), 1000)
    // The server closes its side; the router must pass that on.
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('the connection did not end after the close handshake')), 5_000)
      const done = () => {
        clearTimeout(timer)
        resolve()
      }
      if (ws.socket.readableEnded || ws.socket.destroyed) return done()
      ws.socket.once('end', done)
      ws.socket.once('close', done)
    })
    ws.destroy()
  })
})

describe(`WebSocket with allowPublicTraffic: false (${mode} mode)`, { timeout: 120_000 }, () => {
  let priv
  let url
  let withToken
  before(async () => {
    priv = (await createSandbox({ network: { allowPublicTraffic: false } })).sbx
    assert.ok(priv.trafficAccessToken, 'no trafficAccessToken on the sandbox')
    withToken = { 'e2b-traffic-access-token': priv.trafficAccessToken }
    url = hostUrl(priv, WS_PORT, '/echo')
    await startEchoServer(priv)
    // Wait for the server with the token, so the checks below see a live port.
    keep(upgraded(await wsConnectUntilOpen(url, { headers: withToken }))).destroy()
  })

  test('upgrade without e2b-traffic-access-token → 403 JSON {sandboxId, message, code: 403}', async () => {
    const r = await wsConnect(url)
    if (r.ws) r.ws.destroy()
    assert.equal(r.status, 403, `expected 403, got ${r.status}: ${r.text}`)
    assert.match(String(r.headers['content-type']), /application\/json/)
    assert.ok(r.body, `expected a JSON body, got ${JSON.stringify(r.text)}`)
    assert.equal(r.body.code, 403)
    assert.equal(r.body.sandboxId, priv.sandboxId)
    assert.match(r.body.message, /traffic access token/)
  })

  test('upgrade with a wrong token → 403', async () => {
    const r = await wsConnect(url, { headers: { 'e2b-traffic-access-token': 'wrong-' + priv.trafficAccessToken } })
    if (r.ws) r.ws.destroy()
    assert.equal(r.status, 403, `expected 403, got ${r.status}: ${r.text}`)
    assert.equal(r.body?.code, 403)
    assert.equal(r.body?.sandboxId, priv.sandboxId)
  })

  test('upgrade with the token → 101 and echoes', async () => {
    const ws = keep(upgraded(await wsConnect(url, { headers: withToken })))
    assert.equal(await ws.echo('private hello'), 'private hello')
    const long = 'p'.repeat(1000)
    assert.equal(await ws.echo(long), long)
    ws.destroy()
  })
})
