// Package liveview shows a sandbox to a person's browser behind share
// links that expire, at getHost(ViewPort) and getHost(TakeoverPort):
//
//   - a desktop sandbox's X display (Start, PagePath): noVNC pages inside
//     the sandbox. View-only is enforced in the sandbox, not by the page:
//     the view port's websockify bridges to an x11vnc started with
//     -viewonly, which drops every key and pointer event it is sent; only
//     the takeover port's x11vnc takes input. Both x11vnc listen on
//     loopback ports the router refuses to route (VNCPorts).
//   - a browser sandbox's page (BrowserView, under BrowserPath): served by
//     the server itself, which streams the page's screencast from its
//     DevTools session (internal/browser) and, through the takeover port
//     only, dispatches the page's mouse and keyboard; nothing runs in the
//     sandbox for it.
//
// Either way the router lets a WebSocket through to either port only with
// a token this package signed for that sandbox and port (Signer).
package liveview

import (
	"context"
	"fmt"
	"strconv"
)

const (
	// ViewPort serves the view-only page and WebSocket.
	ViewPort = 6090
	// TakeoverPort serves the interactive page and WebSocket.
	TakeoverPort = 6091

	viewVNCPort     = 5910
	takeoverVNCPort = 5911
)

// VNCPorts are the ports of the two x11vnc behind the noVNC ports: the
// router refuses them, so that the raw VNC servers (which also speak
// WebSocket themselves) cannot be reached around the token check.
var VNCPorts = map[int]bool{viewVNCPort: true, takeoverVNCPort: true}

// RunFunc runs a program in the sandbox (as its user, DISPLAY set) and
// returns its stdout; an error when it cannot or it fails.
type RunFunc func(ctx context.Context, args ...string) ([]byte, error)

// startScript starts, unless already running, the two x11vnc on display
// $1 and a websockify serving noVNC (Debian's, /usr/share/novnc) in front
// of each, every one in a session of its own so that it outlives this
// command, and waits until all four ports listen (counted once each: a
// port may listen on IPv4 and IPv6). A process that exits before
// then fails the script with its log; a sandbox without x11vnc or
// websockify (a browser sandbox) fails it before anything is written.
const startScript = `set -e
command -v x11vnc >/dev/null && command -v websockify >/dev/null || { echo "no x11vnc or websockify: not a desktop sandbox" >&2; exit 1; }
display=$1 dir=/tmp/agent-sandbox-liveview
mkdir -p "$dir"
start() {
  name=$1; shift
  if [ -f "$dir/$name.pid" ] && kill -0 "$(cat "$dir/$name.pid")" 2>/dev/null; then return; fi
  setsid "$@" </dev/null >/dev/null 2>"$dir/$name.log" &
  echo $! >"$dir/$name.pid"
}
vnc="x11vnc -display $display -localhost -shared -forever -nopw -quiet -noxdamage"
start view-vnc $vnc -viewonly -rfbport ` + "%[1]d" + `
start takeover-vnc $vnc -rfbport ` + "%[2]d" + `
start view-web websockify --web /usr/share/novnc ` + "%[3]d" + ` 127.0.0.1:` + "%[1]d" + `
start takeover-web websockify --web /usr/share/novnc ` + "%[4]d" + ` 127.0.0.1:` + "%[2]d" + `
i=0
until [ "$(netstat -ltn | awk '{print $4}' | grep -oE ':(%[1]d|%[2]d|%[3]d|%[4]d)$' | sort -u | wc -l)" -eq 4 ]; do
  for name in view-vnc takeover-vnc view-web takeover-web; do
    if ! kill -0 "$(cat "$dir/$name.pid")" 2>/dev/null; then
      echo "$name exited:" >&2; cat "$dir/$name.log" >&2; rm -f "$dir/$name.pid"; exit 1
    fi
  done
  i=$((i+1)); if [ $i -gt 100 ]; then echo "the live view did not listen within 10 s" >&2; exit 1; fi
  sleep 0.1
done`

// Start starts the live view of X display display (":0") with run; it
// is idempotent, so every share link may call it.
func Start(ctx context.Context, run RunFunc, display string) error {
	script := fmt.Sprintf(startScript, viewVNCPort, takeoverVNCPort, ViewPort, TakeoverPort)
	if _, err := run(ctx, "sh", "-c", script, "sh", display); err != nil {
		return fmt.Errorf("starting the live view: %w", err)
	}
	return nil
}

// PagePath is the noVNC page of the live view on ViewPort (takeover
// false) or TakeoverPort, connecting at once with token: the WebSocket
// path carries it, URL-encoded as noVNC's path setting takes it.
func PagePath(token string, takeover bool) string {
	viewOnly := strconv.FormatBool(!takeover)
	return "/vnc.html?autoconnect=true&reconnect=true&resize=scale&view_only=" + viewOnly +
		"&path=websockify%3Ftoken%3D" + token
}
