package security

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// testFilesAPI plants symlinks inside the sandbox and then asks envd's
// /files API (through the manager's Dial, as an SDK would) to follow them:
// whatever comes back or is written must be the sandbox's, never the
// host's.
func testFilesAPI(t *testing.T, h *harness, tb *table, sb store.Sandbox) {
	hostShadow, _ := os.ReadFile("/etc/shadow")
	hostsBefore, err := os.ReadFile(filepath.Join(h.s.Probe.RootFS, "etc/hosts"))
	if err != nil {
		t.Fatal(err)
	}
	envdPath := h.s.EnvdPath
	envdBefore, err := os.ReadFile(envdPath)
	if err != nil {
		t.Fatal(err)
	}

	links := map[string]string{
		"/home/user/to-marker":      h.marker,
		"/home/user/to-proc1root":   "/proc/1/root" + h.marker,
		"/home/user/to-shadow":      "/etc/shadow",
		"/home/user/to-hosts":       "/etc/hosts",
		"/home/user/to-envd":        "/usr/bin/envd",
		"/home/user/to-proc1-shdw":  "/proc/1/root/etc/shadow",
		"/home/user/to-self-marker": "/proc/self/root" + h.marker,
	}
	for link, target := range links {
		if got := h.probe(sb, "user", "symlink", target, link); got != "ok" {
			t.Fatalf("planting %s -> %s: %s", link, target, got)
		}
	}
	leaks := func(body string) bool {
		return strings.Contains(body, h.markerData) || (len(hostShadow) > 0 && strings.Contains(body, string(hostShadow)))
	}
	summary := func(code int, body string, err error) string {
		if err != nil {
			return err.Error()
		}
		body = strings.TrimSpace(body)
		if len(body) > 60 {
			body = body[:60] + "…"
		}
		return fmt.Sprintf("%d %s", code, body)
	}

	// The positive control of every request below: a file of the user's,
	// read back through the same API, as the same user, just before.
	nonce := "control-" + randomHex(4)
	if code, body, err := h.putFile(sb, "user", "/home/user/control.txt", nonce); err != nil || code != 200 {
		t.Fatalf("planting the control file: %d %s %v", code, body, err)
	}
	controlled := func(u string) (bool, string) {
		code, body, err := h.getFile(sb, u, "/home/user/control.txt")
		if err != nil || code != 200 || body != nonce {
			return false, fmt.Sprintf("POSITIVE CONTROL FAILED: GET /home/user/control.txt as %s: %s", u, summary(code, body, err))
		}
		return true, "control GET of the user's file: 200"
	}

	for _, u := range users {
		for _, c := range []struct {
			attack, path, expected string
			want                   int
			body                   string // what a 200 must hold
		}{
			{"GET /files via symlink to the host marker's path", "/home/user/to-marker", "404: the path does not exist in the sandbox", 404, ""},
			{"GET /files via symlink into /proc/1/root", "/home/user/to-proc1root", "403 (EACCES), no host data", 403, ""},
			{"GET /files via symlink to /proc/self/root + marker", "/home/user/to-self-marker", "404: /proc/self/root is envd's, the sandbox root", 404, ""},
			{"GET /files ../../../ traversal to the host marker", "/home/user/../../../.." + h.marker, "404: resolved in the sandbox", 404, ""},
			{"GET /files via symlink to /etc/shadow (root's, 0600)", "/home/user/to-shadow",
				h.eitherUser(u, "403: read as user, who may not", "200 with the sandbox's /etc/shadow, not the host's"),
				map[string]int{"user": 403, "root": 200}[u], map[string]string{"root": sandboxSecret}[u]},
		} {
			ok, ctl := controlled(u)
			code, body, err := h.getFile(sb, u, c.path)
			ok = ok && err == nil && code == c.want && !leaks(body) && strings.Contains(body, c.body)
			tb.add(t, outcome{attack: c.attack, as: u, expected: c.expected, observed: summary(code, body, err) + "; " + ctl, contained: ok})
		}
	}

	// Writes as user have user's permissions: not into root's directories.
	// Root's write there is the positive control.
	for _, u := range users {
		ok, ctl := controlled(u)
		path := "/etc/written-by-" + u
		code, body, err := h.putFile(sb, u, path, "x")
		exists := h.probe(sb, "root", "stat", path)
		want, expected := 403, "403: user may not create files in root's 0755 /etc; nothing created"
		if u == "root" {
			want, expected = 200, "200: root may (the control of the row above)"
		}
		tb.add(t, outcome{attack: "POST /files into /etc (root's, 0755)", as: u, expected: expected,
			observed:  fmt.Sprintf("%s; file there afterwards: %s; %s", summary(code, body, err), exists, ctl),
			contained: ok && err == nil && code == want && (exists == "ok") == (u == "root")})
	}

	// Writes through the links land in the sandbox's overlay. The marker's
	// directory is made in the sandbox first, so that the write can land.
	if code, body, err := h.putFile(sb, "user", filepath.Join(filepath.Dir(h.marker), "other"), "x"); err != nil || code != 200 {
		t.Fatalf("making the marker's directory in the sandbox: %d %s %v", code, body, err)
	}
	code, body, err := h.putFile(sb, "user", "/home/user/to-marker", "written-by-sandbox")
	same, why := fileUnchanged(h.marker, h.markerData)
	_, inside, _ := h.getFile(sb, "root", h.marker)
	tb.add(t, outcome{attack: "POST /files via symlink to the host marker's path", as: "user",
		expected:  "200, written inside the sandbox (the write is its own control); host file unchanged",
		observed:  fmt.Sprintf("%s; host unchanged=%v %s; sandbox copy=%q", summary(code, body, err), same, why, inside),
		contained: err == nil && code == 200 && same && inside == "written-by-sandbox"})

	ok, ctl := controlled("user")
	code, body, err = h.putFile(sb, "user", "/home/user/to-hosts", "127.0.0.1 pwned\n")
	hostsAfter, _ := os.ReadFile(filepath.Join(h.s.Probe.RootFS, "etc/hosts"))
	inSandbox := h.probe(sb, "root", "read", "/etc/hosts")
	tb.add(t, outcome{attack: "POST /files via symlink to /etc/hosts (root's template file)", as: "user",
		expected: "403: written as user, who may not; the sandbox's and the host template's /etc/hosts unchanged",
		observed: fmt.Sprintf("%s; template unchanged=%v; sandbox /etc/hosts %s; %s",
			summary(code, body, err), string(hostsAfter) == string(hostsBefore), inSandbox, ctl),
		contained: ok && err == nil && code == 403 && string(hostsAfter) == string(hostsBefore) && !strings.Contains(inSandbox, "pwned")})

	ok, ctl = controlled("root")
	code, body, err = h.putFile(sb, "root", "/home/user/to-envd", "#!/bin/sh\necho pwned\n")
	envdAfter, _ := os.ReadFile(envdPath)
	tb.add(t, outcome{attack: "POST /files via symlink onto /usr/bin/envd (host binary)", as: "root",
		expected:  "500, read-only file system (the host's binaries tmpfs); host binary unchanged",
		observed:  fmt.Sprintf("%s; host envd unchanged=%v; %s", summary(code, body, err), string(envdAfter) == string(envdBefore), ctl),
		contained: ok && err == nil && code == 500 && strings.Contains(body, "read-only file system") && string(envdAfter) == string(envdBefore)})

	code, body, err = h.putFile(sb, "root", "/proc/sys/kernel/core_pattern", "|/tmp/pwn")
	core, _ := os.ReadFile("/proc/sys/kernel/core_pattern")
	tb.add(t, outcome{attack: "POST /files to /proc/sys/kernel/core_pattern", as: "root",
		expected:  "500, read-only file system (/proc/sys); host core_pattern unchanged",
		observed:  fmt.Sprintf("%s; host core_pattern=%q; %s", summary(code, body, err), strings.TrimSpace(string(core)), ctl),
		contained: ok && err == nil && code == 500 && strings.Contains(body, "read-only file system") && !strings.Contains(string(core), "pwn")})
}
