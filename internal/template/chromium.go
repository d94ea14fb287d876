package template

import (
	"strconv"
	"strings"
)

// DevToolsPort is where the Chromium of the browser and desktop templates
// serves the DevTools protocol, on the sandbox's loopback (Chromium binds
// nothing else); the router reaches it there and rewrites what Chromium
// says about its own address (router's devtools.go).
const DevToolsPort = 9222

// chromiumPackages are what a template with Chromium installs: Debian's
// Chromium and a font, so that pages render text in screenshots and PDFs.
var chromiumPackages = []string{"chromium", "fonts-dejavu-core"}

// chromiumNoSandbox turns off Chromium's own sandbox, which cannot start
// in a sandbox (it needs user namespaces, which sandboxes may not create,
// or the setuid helper, which is not installed): /usr/bin/chromium passes
// --no-sandbox by default, and the sandbox is the isolation boundary.
// Programs that start /usr/lib/chromium/chromium itself must pass the
// flag. Debian's wrapper script sources every file in /etc/chromium.d.
var chromiumNoSandbox = Step{File: &FileStep{
	Path:    "/etc/chromium.d/agent-sandbox",
	Content: "# Chromium's sandbox cannot start inside an agent-sandbox sandbox.\nexport CHROMIUM_FLAGS=\"$CHROMIUM_FLAGS --no-sandbox\"\n",
	Mode:    0o644,
}}

// chromiumStartCmd is the start command of a template's Chromium: as the
// sandbox user, with remote debugging on loopback port DevToolsPort, over
// a profile of its own (Chromium refuses remote debugging on the default
// one), restarted if it dies, each time after the shell command wait
// returns (empty: at once). env (NAME=value) and flags are added to
// those; --disable-dev-shm-usage keeps its shared memory in /tmp, since a
// sandbox's /dev/shm may be small.
func chromiumStartCmd(wait string, env, flags []string) string {
	cmd := append([]string{"runuser", "-u", "user", "--", "env", "HOME=/home/user"}, env...)
	cmd = append(cmd, "chromium")
	cmd = append(cmd, flags...)
	cmd = append(cmd,
		"--remote-debugging-address=127.0.0.1", "--remote-debugging-port="+strconv.Itoa(DevToolsPort),
		"--user-data-dir=/home/user/.config/chromium-devtools", "--disable-dev-shm-usage", "about:blank")
	if wait != "" {
		wait += "; "
	}
	return "while :; do " + wait + strings.Join(cmd, " ") + "; sleep 0.5; done"
}
