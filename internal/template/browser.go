package template

import "strconv"

// BrowserName is the built-in template with a web browser.
const BrowserName = "browser"

// DevToolsPort is where the browser template's Chromium serves the
// DevTools protocol, on the sandbox's loopback (Chromium binds nothing
// else); the router reaches it there and rewrites what Chromium says about
// its own address (router's devtools.go).
const DevToolsPort = 9222

// devToolsChromium is the browser template's start command: headless
// Chromium as the sandbox user with remote debugging on loopback, over a
// profile of its own (Chromium refuses remote debugging on the default
// one), restarted if it dies. --disable-dev-shm-usage keeps its shared
// memory in /tmp, since a sandbox's /dev/shm may be small.
var devToolsChromium = "while :; do runuser -u user -- env HOME=/home/user chromium --headless" +
	" --remote-debugging-address=127.0.0.1 --remote-debugging-port=" + strconv.Itoa(DevToolsPort) +
	" --user-data-dir=/home/user/.config/chromium-devtools --disable-dev-shm-usage about:blank; sleep 0.5; done"

// Browser returns the spec of the built-in "browser" template: base with
// Debian's Chromium, for headless use (`chromium --headless`), and a font
// so that pages render text in screenshots and PDFs. Every sandbox runs
// one headless Chromium with the DevTools protocol on DevToolsPort, which
// a create waits for.
//
// Chromium's own sandbox cannot start in a sandbox (it needs user
// namespaces, which sandboxes may not create, or the setuid helper, which
// is not installed), so /usr/bin/chromium passes --no-sandbox by default:
// the sandbox is the isolation boundary. Programs that start
// /usr/lib/chromium/chromium itself must pass the flag.
func Browser() Spec {
	return Spec{
		Name:     BrowserName,
		From:     BaseName,
		Packages: []string{"chromium", "fonts-dejavu-core"},
		Steps: []Step{
			// Debian's wrapper script sources every file in /etc/chromium.d.
			{File: &FileStep{
				Path:    "/etc/chromium.d/agent-sandbox",
				Content: "# Chromium's sandbox cannot start inside an agent-sandbox sandbox.\nexport CHROMIUM_FLAGS=\"$CHROMIUM_FLAGS --no-sandbox\"\n",
				Mode:    0o644,
			}},
		},
		StartCmd:  devToolsChromium,
		ReadyPort: DevToolsPort,
	}
}
