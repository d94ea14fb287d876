package sandbox

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail/jailtest"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

// nobody is the unprivileged host user the probes run as.
const nobody = 65534

// userPort is where each sandbox runs a server of its user's, on every
// address.
const userPort = 8000

// boundaryPorts are what the host must not reach: envd, the code
// interpreter's port (a stand-in server there) and a user's port.
var boundaryPorts = []int{EnvdPort, template.CodeInterpreterPort, userPort}

// TestHostBoundary checks the host → sandbox boundary on a warm-pool member,
// a plain sandbox and a secure one: neither an unprivileged host user nor
// host root opens a connection to envd, 49999 or a user port over the
// sandbox's veth, while the server's own path (Manager.Dial, and the
// member's instance for the one the manager does not expose) reaches each.
// The probes prove they work: the same probe reaches a host loopback
// listener as the same user, and each sandbox reaches its servers on its
// own address.
func TestHostBoundary(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.LockFirewall(t)
	ctx := context.Background()
	fwExisted, _, err := network.FirewallChains()
	if err != nil {
		t.Fatal(err)
	}
	pool, err := network.NewPool(netip.MustParsePrefix("10.249.0.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	fw, err := network.NewFirewall(network.FirewallConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if !fwExisted {
		t.Cleanup(func() {
			if err := fw.Delete(context.Background()); err != nil {
				t.Errorf("deleting firewall: %v", err)
			}
		})
	}
	cfg, _, _ := jailConfig(t, func(c *jail.Config) { c.Network = jailtest.Network(t, c.RunDir, pool, fw) })
	tiny := cfg.Templates.(fakeTemplates)["tiny"]
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := jailtest.AddBinary(tiny.RootFS, self, "usr/bin/probe", 0o755); err != nil {
		t.Fatal(err)
	}
	pooled := *tiny
	pooled.Name, pooled.ID = "pooled", "pooled-00000000000"
	cfg.Templates = fakeTemplates{"tiny": tiny, "pooled": &pooled}
	cfg.WarmPools = map[string]PoolSize{"pooled": {Min: 1, Max: 1}}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })

	// The three targets, each with its servers started through envd.
	type target struct {
		name  string
		addr  netip.Addr                                            // on its veth
		dial  func(ctx context.Context, port int) (net.Conn, error) // the server's path
		token string
	}
	var targets []target
	waitFor(t, 30*time.Second, "pool filled", func() bool { return m.Pools()["pooled"].Ready == 1 })
	m.mu.Lock()
	member := m.pools["pooled"].ready[0]
	m.mu.Unlock()
	targets = append(targets, target{"warm-pool member", member.inst.Link().Address, member.inst.Dial, member.rec.EnvdAccessToken})
	for _, secure := range []bool{false, true} {
		sb, err := m.Create(ctx, CreateRequest{Template: "tiny", Timeout: 5 * time.Minute, Secure: secure})
		if err != nil {
			t.Fatalf("Create: %v", err)
		}
		t.Cleanup(func() { _ = m.Kill(context.Background(), sb.ID) })
		live, err := m.lookup(sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		name := "plain sandbox"
		if secure {
			name = "secure sandbox"
		}
		targets = append(targets, target{name, live.inst.Link().Address,
			func(ctx context.Context, port int) (net.Conn, error) { return m.Dial(ctx, sb.ID, port) }, sb.EnvdAccessToken})
	}

	var hostAddrs []string // what the host probes
	for _, tg := range targets {
		if !pool.Prefix().Contains(tg.addr) {
			t.Fatalf("%s: address %s, want one of %s (has it a veth?)", tg.name, tg.addr, pool.Prefix())
		}
		client := processClientVia(tg.dial)
		for _, port := range boundaryPorts[1:] {
			script := fmt.Sprintf("/usr/bin/probe serve 0.0.0.0:%d %s-%d >/dev/null 2>&1 &", port, strings.ReplaceAll(tg.name, " ", "-"), port)
			if out, code := runVia(t, client, tg.token, "/bin/sh", "-c", script); code != 0 {
				t.Fatalf("%s: starting a server on %d: exit %d %s", tg.name, port, code, out)
			}
		}
		var own []string
		for _, port := range boundaryPorts {
			a := netip.AddrPortFrom(tg.addr, uint16(port)).String()
			own = append(own, a)
			hostAddrs = append(hostAddrs, a)
		}

		// The server's path reaches each port: envd's health, and the
		// servers' tags.
		for _, port := range boundaryPorts {
			want := fmt.Sprintf("%s-%d", strings.ReplaceAll(tg.name, " ", "-"), port)
			path := "/"
			if port == EnvdPort {
				want, path = "204", "/health"
			}
			var got string
			waitFor(t, 10*time.Second, fmt.Sprintf("%s port %d through the server's path", tg.name, port), func() bool {
				got = httpVia(tg.dial, port, path)
				return got == want
			})
		}
		// Inside, the user's and the interpreter's servers answer on the
		// sandbox's own address; envd listens on its loopback only.
		out, _ := runVia(t, client, tg.token, "/usr/bin/probe", append([]string{"dial"}, own...)...)
		want := probeResults(own, map[string]bool{own[0]: false, own[1]: true, own[2]: true})
		if got := parseProbe(t, out); !equalResults(got, want) {
			t.Errorf("%s, from inside: %v, want %v", tg.name, got, want)
		}
	}

	// A host loopback listener, which the probe must reach.
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	control := ln.Addr().String()
	want := probeResults(hostAddrs, nil)
	want[control] = true

	t.Run("as nobody", func(t *testing.T) {
		out := probeAs(t, self, nobody, append([]string{control}, hostAddrs...))
		if !strings.HasPrefix(out, fmt.Sprintf("uid %d\n", nobody)) {
			t.Fatalf("the probe did not run as uid %d: %q", nobody, out)
		}
		if got := parseProbe(t, out); !equalResults(got, want) {
			t.Errorf("as nobody: %v, want %v", got, want)
		}
	})
	t.Run("as root", func(t *testing.T) {
		got := probeResults(append([]string{control}, hostAddrs...), nil)
		dialAll(got)
		if !equalResults(got, want) {
			t.Errorf("as host root: %v, want %v", got, want)
		}
	})
}

// httpVia sends GET path to port over dial and returns the body, or the
// status for an empty body, or the error.
func httpVia(dial func(context.Context, int) (net.Conn, error), port int, path string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{
		DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx, port) },
		DisableKeepAlives: true,
	}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://sandbox"+path, nil)
	resp, err := hc.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if len(b) == 0 {
		return strconv.Itoa(resp.StatusCode)
	}
	return string(b)
}

// probeAs runs the test binary as probe as host user uid against addrs
// and returns its output. The binary is copied where uid may execute it.
func probeAs(t *testing.T, self string, uid int, addrs []string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "probe-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "probe")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"dial"}, addrs...)...)
	cmd.Dir = dir
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("probe as uid %d: %v: %s", uid, err, out)
	}
	return string(out)
}

// probeMain is the test binary as /usr/bin/probe (in sandboxes, and on the
// host as an unprivileged user):
//
//	probe serve ADDR TAG   answers every HTTP request on ADDR with TAG
//	probe dial ADDR...     prints "uid N", then "ADDR ok" or "ADDR fail ERR"
//	                       for a TCP connection to each (2 s at most)
func probeMain(args []string) int {
	switch {
	case len(args) == 3 && args[0] == "serve":
		err := http.ListenAndServe(args[1], http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			io.WriteString(w, args[2])
		}))
		fmt.Fprintln(os.Stderr, err)
		return 1
	case len(args) >= 1 && args[0] == "dial":
		res := probeResults(args[1:], nil)
		dialAll(res)
		fmt.Printf("uid %d\n", os.Getuid())
		for _, a := range args[1:] {
			if res[a] {
				fmt.Println(a, "ok")
			} else {
				fmt.Println(a, "fail")
			}
		}
		return 0
	}
	fmt.Fprintln(os.Stderr, "usage: probe serve ADDR TAG | probe dial ADDR...")
	return 2
}

// probeResults maps each of addrs to reached (from reached, else false).
func probeResults(addrs []string, reached map[string]bool) map[string]bool {
	out := make(map[string]bool, len(addrs))
	for _, a := range addrs {
		out[a] = reached[a]
	}
	return out
}

// dialAll sets each address of res to whether a TCP connection to it
// succeeds within 2 s; all at once.
func dialAll(res map[string]bool) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	// The addresses are taken first: the dials write res while this ranges.
	for _, a := range slices.Collect(maps.Keys(res)) {
		wg.Go(func() {
			c, err := net.DialTimeout("tcp", a, 2*time.Second)
			if err == nil {
				c.Close()
			}
			mu.Lock()
			res[a] = err == nil
			mu.Unlock()
		})
	}
	wg.Wait()
}

// parseProbe reads what probe dial printed.
func parseProbe(t *testing.T, out string) map[string]bool {
	t.Helper()
	res := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		addr, verdict, ok := strings.Cut(sc.Text(), " ")
		if !ok || addr == "uid" {
			continue
		}
		res[addr] = verdict == "ok"
	}
	return res
}

func equalResults(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
