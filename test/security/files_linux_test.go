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
	hostsBefore, err := os.ReadFile(filepath.Join(h.rootfs, "etc/hosts"))
	if err != nil {
		t.Fatal(err)
	}
	envdPath := filepath.Join(filepath.Dir(h.stateDir), "envd")
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

	for _, u := range users {
		for _, c := range []struct {
			attack, path, expected string
			want                   int
		}{
			{"GET /files via symlink to the host marker's path", "/home/user/to-marker", "404: the path does not exist in the sandbox", 404},
			{"GET /files via symlink into /proc/1/root", "/home/user/to-proc1root", "403 (EACCES), no host data", 403},
			{"GET /files via symlink to /proc/self/root + marker", "/home/user/to-self-marker", "404: /proc/self/root is envd's, the sandbox root", 404},
			{"GET /files via symlink to /etc/shadow", "/home/user/to-shadow", "200 with the sandbox's /etc/shadow, not the host's", 200},
			{"GET /files ../../../ traversal to the host marker", "/home/user/../../../.." + h.marker, "404: resolved in the sandbox", 404},
		} {
			code, body, err := h.getFile(sb, u, c.path)
			ok := err == nil && code == c.want && !leaks(body)
			if c.want == 200 {
				ok = ok && strings.Contains(body, sandboxSecret)
			}
			tb.add(t, outcome{attack: c.attack, as: u, expected: c.expected, observed: summary(code, body, err), contained: ok})
		}
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
		expected:  "written inside the sandbox; host file unchanged",
		observed:  fmt.Sprintf("host unchanged=%v %s; sandbox copy=%q; %s", same, why, inside, summary(code, body, err)),
		contained: same && inside == "written-by-sandbox"})

	code, body, err = h.putFile(sb, "user", "/home/user/to-hosts", "127.0.0.1 pwned\n")
	hostsAfter, _ := os.ReadFile(filepath.Join(h.rootfs, "etc/hosts"))
	owner := h.probe(sb, "root", "owner", "/etc/hosts")
	tb.add(t, outcome{attack: "POST /files via symlink to /etc/hosts (a template file)", as: "user",
		expected: "copied up into the sandbox's overlay, still root's (not given to user); host template unchanged",
		observed: fmt.Sprintf("template unchanged=%v; sandbox /etc/hosts now owned by %s; %s",
			string(hostsAfter) == string(hostsBefore), strings.TrimPrefix(owner, "ok "), summary(code, body, err)),
		contained: string(hostsAfter) == string(hostsBefore) && owner == "ok 0:0"})

	code, body, err = h.putFile(sb, "root", "/home/user/to-envd", "#!/bin/sh\necho pwned\n")
	envdAfter, _ := os.ReadFile(envdPath)
	tb.add(t, outcome{attack: "POST /files via symlink onto /usr/bin/envd (host binary)", as: "root",
		expected:  "fails (read-only mount); host binary unchanged",
		observed:  fmt.Sprintf("host envd unchanged=%v; %s", string(envdAfter) == string(envdBefore), summary(code, body, err)),
		contained: err == nil && code >= 400 && string(envdAfter) == string(envdBefore)})

	code, body, err = h.putFile(sb, "root", "/proc/sys/kernel/core_pattern", "|/tmp/pwn")
	core, _ := os.ReadFile("/proc/sys/kernel/core_pattern")
	tb.add(t, outcome{attack: "POST /files to /proc/sys/kernel/core_pattern", as: "root",
		expected:  "fails (not a regular file / read-only); host core_pattern unchanged",
		observed:  fmt.Sprintf("host core_pattern=%q; %s", strings.TrimSpace(string(core)), summary(code, body, err)),
		contained: err == nil && code >= 400 && !strings.Contains(string(core), "pwn")})
}
