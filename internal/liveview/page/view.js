// The live view of a sandbox's browser (internal/liveview's BrowserView):
// the page's screencast, one JPEG per binary message, drawn on a canvas;
// through the takeover link, the mouse and keyboard on the canvas are sent
// back as input events (browser.InputEvent). The server refuses input on
// the view link whatever this page sends.
'use strict'

const canvas = document.getElementById('screen')
const statusLine = document.getElementById('status')
const ctx = canvas.getContext('2d')
let socket = null
let takeover = false
let retryMs = 1000

function connect() {
  const url = new URL('websocket' + location.search, location.href)
  url.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:'
  socket = new WebSocket(url)
  socket.binaryType = 'blob'
  socket.onmessage = (ev) => {
    if (typeof ev.data !== 'string') {
      draw(ev.data)
      return
    }
    const msg = JSON.parse(ev.data)
    if (msg.mode) {
      retryMs = 1000
      takeover = msg.mode === 'takeover'
      document.body.dataset.mode = msg.mode
      statusLine.textContent = takeover
        ? 'Connected: your mouse and keyboard drive the browser (click into the picture first)'
        : 'Connected: view only'
    }
    if (msg.error) statusLine.textContent = msg.error
  }
  socket.onclose = (ev) => {
    takeover = false
    statusLine.textContent = `Disconnected${ev.reason ? ` (${ev.reason})` : ''}; connecting again…`
    setTimeout(connect, retryMs)
    retryMs = Math.min(retryMs * 2, 10000)
  }
}

// Frames are decoded one at a time; one that comes meanwhile replaces any
// still waiting, so a slow page shows the latest picture, not a backlog.
let waiting = null
let drawing = false
let frames = 0
async function draw(blob) {
  waiting = blob
  if (drawing) return
  drawing = true
  while (waiting) {
    const next = waiting
    waiting = null
    try {
      const img = await createImageBitmap(next)
      if (canvas.width !== img.width || canvas.height !== img.height) {
        canvas.width = img.width
        canvas.height = img.height
      }
      ctx.drawImage(img, 0, 0)
      img.close()
      canvas.dataset.frames = String(++frames)
    } catch (err) {
      statusLine.textContent = `A frame could not be drawn: ${err}`
    }
  }
  drawing = false
}

// point is ev's place as fractions of the picture, which object-fit
// centres in the canvas box; null off the picture.
function point(ev) {
  if (!canvas.width) return null
  const box = canvas.getBoundingClientRect()
  const scale = Math.min(box.width / canvas.width, box.height / canvas.height)
  const w = canvas.width * scale
  const h = canvas.height * scale
  const x = (ev.clientX - box.left - (box.width - w) / 2) / w
  const y = (ev.clientY - box.top - (box.height - h) / 2) / h
  return x >= 0 && x <= 1 && y >= 0 && y <= 1 ? { x, y } : null
}

function modifiers(ev) {
  return (ev.altKey ? 1 : 0) | (ev.ctrlKey ? 2 : 0) | (ev.metaKey ? 4 : 0) | (ev.shiftKey ? 8 : 0)
}

function send(msg) {
  if (takeover && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify(msg))
}

const buttons = ['left', 'middle', 'right']

function held(ev) {
  if (ev.buttons & 1) return 'left'
  if (ev.buttons & 4) return 'middle'
  if (ev.buttons & 2) return 'right'
  return 'none'
}

for (const [type, kind] of [['mousedown', 'mousePressed'], ['mouseup', 'mouseReleased']]) {
  canvas.addEventListener(type, (ev) => {
    const p = point(ev)
    const button = buttons[ev.button]
    if (!takeover || !p || !button) return
    ev.preventDefault()
    canvas.focus()
    send({ type: kind, ...p, button, clickCount: Math.min(Math.max(ev.detail, 1), 3), modifiers: modifiers(ev) })
  })
}

// Moves are sent at most once an animation frame.
let move = null
canvas.addEventListener('mousemove', (ev) => {
  const p = point(ev)
  if (!takeover || !p) return
  if (!move) {
    requestAnimationFrame(() => {
      send(move)
      move = null
    })
  }
  move = { type: 'mouseMoved', ...p, button: held(ev), modifiers: modifiers(ev) }
})

canvas.addEventListener(
  'wheel',
  (ev) => {
    const p = point(ev)
    if (!takeover || !p) return
    ev.preventDefault()
    const unit = [1, 40, canvas.height][ev.deltaMode] // pixels, lines, pages
    const clamp = (d) => Math.max(-10000, Math.min(10000, d * unit))
    send({ type: 'mouseWheel', ...p, deltaX: clamp(ev.deltaX), deltaY: clamp(ev.deltaY), modifiers: modifiers(ev) })
  },
  { passive: false }
)

canvas.addEventListener('contextmenu', (ev) => {
  if (takeover) ev.preventDefault()
})

for (const [type, kind] of [['keydown', 'keyDown'], ['keyup', 'keyUp']]) {
  canvas.addEventListener(type, (ev) => {
    if (!takeover) return
    ev.preventDefault()
    const msg = { type: kind, key: ev.key, code: ev.code, keyCode: ev.keyCode, modifiers: modifiers(ev) }
    // What the key types: one character, or Enter's carriage return;
    // nothing with Ctrl, Alt or Meta held (shortcuts).
    const plain = !ev.ctrlKey && !ev.altKey && !ev.metaKey
    if (kind === 'keyDown' && plain && [...ev.key].length === 1) msg.text = ev.key
    if (kind === 'keyDown' && plain && ev.key === 'Enter') msg.text = '\r'
    send(msg)
  })
}

connect()
