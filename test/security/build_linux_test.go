package security

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/cgroup"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox/sandboxtest"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// userPort is a sandbox's user service in these cases.
const userPort = 8000

// TestBuildSteps is the security issue's acceptance point 2: a template
// build step, run by the server's step runner (Manager.RunStep) as root
// of its image, reaches neither the host's loopback ports, a host abstract
// UNIX socket, the metadata address nor any sandbox (a warm pool member, a
// plain and a secure one), while it reaches the name the build policy
// allows; it runs as an unprivileged host uid; it is stopped at its
// timeout; and a fork bomb or a memory bomb in it leaves a neighbour
// sandbox and the host answering, and the step fails.
func TestBuildSteps(t *testing.T) {
	start := time.Now()
	h := newHarness(t, setup{sandboxtest.Jail, jail.UsernsOn}, func(c *sandbox.Config) {
		c.WarmPools = map[string]sandbox.PoolSize{"probe": {Min: 1, Max: 1}}
	})
	tb := &table{}
	defer func() { t.Logf("build step cases (%s):\n%s", time.Since(start).Round(time.Second), tb) }()
	ctx := context.Background()

	// The targets: a plain and a secure sandbox with services on 49999
	// and a user port, and a warm pool member (envd only, uninitialised).
	plain, err := h.m.Create(ctx, sandbox.CreateRequest{Template: "probe", Timeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.m.Kill(context.Background(), plain.ID) })
	secure := h.create("")
	for _, sb := range []store.Sandbox{plain, secure} {
		for _, port := range []int{49999, userPort} {
			h.serve(sb, port)
		}
	}
	member := h.poolMember()

	step := func(name string, timeout time.Duration, onLine func(string), args ...string) (string, int, error) {
		t.Helper()
		upper, err := os.MkdirTemp(t.TempDir(), "upper-")
		if err != nil {
			t.Fatal(err)
		}
		var last string
		code, err := h.m.RunStep(ctx, template.StepSpec{
			Layers: []string{h.s.Probe.RootFS}, Upper: upper, Args: args, Dir: "/",
			Env: []string{"PATH=/usr/bin:/bin", "HOME=/root"}, Timeout: timeout,
			Output: func(l string) {
				last = l
				if onLine != nil {
					onLine(l)
				}
			},
		})
		t.Logf("step %s: %q exit %d, %v", name, last, code, err)
		return last, code, err
	}
	probe := func(args ...string) string {
		out, code, err := step(args[0], time.Minute, nil, append([]string{"/usr/bin/probe"}, args...)...)
		switch {
		case err != nil:
			return "step error: " + err.Error()
		case code != 0 && out == "":
			return fmt.Sprintf("exit %d", code)
		}
		return out
	}
	ok := func(s string) bool { return strings.HasPrefix(s, "ok") }
	blocked := func(s string) bool { return !ok(s) && !strings.HasPrefix(s, "step error") && s != "" }

	// Positive control: the step reaches what the build policy allows, so
	// a probe that reaches nothing else was able to reach something.
	control := probe("get", "http://site.test/")
	tb.add(t, outcome{attack: "control: HTTP GET http://site.test/ (allowed by the build policy)", as: "root",
		expected: "reached", observed: control, contained: ok(control)})
	if !ok(control) {
		t.Fatal("the positive control failed: the cases below would prove nothing")
	}

	// The host: a listener on every address (127.0.0.1 included) and an
	// abstract UNIX socket, each answered "host" when the test dials it.
	abstract := h.abstractSocket()
	for _, c := range []struct {
		attack, expected string
		control          func() string // the same probe from the host
		args             []string
		contained        func(string) bool
	}{
		{"TCP to the host's port on 127.0.0.1", "ECONNREFUSED: the step's own loopback",
			func() string { return dialHost("tcp", "127.0.0.1:"+h.hostPort) }, []string{"tcp", "127.0.0.1:" + h.hostPort},
			func(s string) bool { return s == "ECONNREFUSED" }},
		{"TCP to the host's port on its uplink address", "dropped",
			func() string { return dialHost("tcp", net.JoinHostPort(h.in.HostAddr.String(), h.hostPort)) },
			[]string{"tcp", net.JoinHostPort(h.in.HostAddr.String(), h.hostPort)}, blocked},
		{"connect to a host abstract UNIX socket " + abstract, "ECONNREFUSED: abstract sockets are per network namespace",
			func() string { return dialHost("unix", abstract) }, []string{"unix", abstract},
			func(s string) bool { return s == "ECONNREFUSED" }},
	} {
		ctl := c.control()
		got := probe(c.args...)
		tb.add(t, outcome{attack: c.attack, as: "root", expected: c.expected,
			observed: fmt.Sprintf("%s (from the host: %s)", got, ctl), contained: ctl == `ok connected, read "host"` && c.contained(got)})
	}
	for _, c := range []struct{ attack, expected, got string }{
		{"TCP to 169.254.169.254:8080 (metadata)", "dropped", probe("tcp", "169.254.169.254:8080")},
		{"HTTP GET http://169.254.169.254/ (metadata)", "403 from the egress proxy", probe("get", "http://169.254.169.254/")},
	} {
		tb.add(t, outcome{attack: c.attack, as: "root", expected: c.expected, observed: c.got, contained: blocked(c.got)})
	}

	// Other sandboxes, on every port that answers the server.
	targets := []struct {
		what  string
		addr  string
		ports []int
		dial  func(port int) string // the server's path, the positive control
	}{
		{"a plain sandbox", h.link(plain).Address.String(), []int{sandbox.EnvdPort, 49999, userPort}, h.dialer(plain)},
		{"a secure sandbox", h.link(secure).Address.String(), []int{sandbox.EnvdPort, 49999, userPort}, h.dialer(secure)},
		{"a warm pool member", member.addr, []int{sandbox.EnvdPort}, member.dial},
	}
	for _, target := range targets {
		for _, port := range target.ports {
			ctl := target.dial(port)
			got := probe("tcp", net.JoinHostPort(target.addr, strconv.Itoa(port)))
			tb.add(t, outcome{attack: fmt.Sprintf("TCP to %s's port %d", target.what, port), as: "root",
				expected: "dropped (the server's path reaches it)",
				observed: fmt.Sprintf("%s (server's path: %s)", got, ctl), contained: strings.HasPrefix(ctl, "ok") && blocked(got)})
		}
	}

	// Its ids: root of the step is an unprivileged host uid, seen from the
	// host in /proc/<pid>/status of the step's process.
	var hostUID string
	out, code, err := step("ids", time.Minute, func(l string) {
		if l == "ready" && hostUID == "" {
			hostUID = h.stepProcessUID("sleep")
		}
	}, "/bin/sh", "-c", "head -1 /proc/self/uid_map | tr -s ' ' ; id -u; echo ready; sleep 5")
	base, _ := strconv.Atoi(strings.Fields(hostUID + " 0")[0])
	tb.add(t, outcome{attack: "build step's root: host uid (/proc/<pid>/status Uid)", as: "root",
		expected:  "an unprivileged host uid (its user namespace's range)",
		observed:  fmt.Sprintf("host Uid %s; last line %q exit %d %v", hostUID, out, code, err),
		contained: err == nil && code == 0 && base >= 100000})

	// The step's timeout stops it and says so.
	t0 := time.Now()
	_, _, err = step("timeout", 3*time.Second, nil, "/bin/sh", "-c", "sleep 600 & sleep 600")
	took := time.Since(t0)
	tb.add(t, outcome{attack: "a step that runs forever (sleep 600, timeout 3s)", as: "root",
		expected:  "stopped at its timeout, with an error that says so",
		observed:  fmt.Sprintf("after %s: %v", took.Round(100*time.Millisecond), err),
		contained: errors.Is(err, template.ErrStepTimeout) && strings.Contains(err.Error(), "timed out after 3s") && took < 30*time.Second})

	// Bombs: a neighbour sandbox and the host keep answering, the step
	// fails.
	neighbour := func() string {
		t0 := time.Now()
		got := h.probe(plain, "user", "stat", "/")
		t1 := time.Now()
		hostErr := exec.Command("/bin/true").Run()
		return fmt.Sprintf("neighbour %q in %s, host exec %v in %s", got, t1.Sub(t0).Round(time.Millisecond), hostErr, time.Since(t1).Round(time.Millisecond))
	}
	var during string
	var once sync.Once
	out, code, err = step("fork bomb", 10*time.Second, func(l string) {
		if strings.HasPrefix(l, "started=") {
			once.Do(func() { during = l + "; " + neighbour() })
		}
	}, "/usr/bin/probe", "fork", "5000", "600")
	tb.add(t, outcome{attack: "fork bomb in a build step (5000 children)", as: "root",
		expected:  "stops at the pids limit; a neighbour sandbox and the host answer within 5s; the step fails",
		observed:  fmt.Sprintf("%s; step: %q exit %d %v", during, out, code, err),
		contained: strings.Contains(during, "err=EAGAIN") && withinBound(during) && (err != nil || code != 0)})

	during = ""
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(time.Second)
		during = neighbour()
	}()
	out, code, err = step("memory bomb", time.Minute, nil, "/usr/bin/probe", "alloc", strconv.Itoa(4*memoryMB))
	<-done
	tb.add(t, outcome{attack: fmt.Sprintf("memory bomb in a build step (%d MB in %d MB)", 4*memoryMB, memoryMB), as: "root",
		expected:  "OOM-killed in the step's sandbox (exit 137); a neighbour sandbox and the host answer within 5s",
		observed:  fmt.Sprintf("step: %q exit %d %v; during: %s; after: %s", out, code, err, during, neighbour()),
		contained: err == nil && code == 137 && withinBound(during)})

	if ids := h.leftoverSteps(); len(ids) > 0 {
		t.Errorf("build step sandboxes left behind: %v", ids)
	}
}

// withinBound reports whether a neighbour() report shows the neighbour's
// command and the host's exec each done within 5 s.
func withinBound(s string) bool {
	i := strings.Index(s, "neighbour ")
	if i < 0 || !strings.Contains(s[i:], `neighbour "ok" in `) || !strings.Contains(s, "host exec <nil> in ") {
		return false
	}
	rest := s[i+len(`neighbour "ok" in `):]
	d1, _, _ := strings.Cut(rest, ",")
	_, d2, _ := strings.Cut(rest, "host exec <nil> in ")
	n1, e1 := time.ParseDuration(d1)
	n2, e2 := time.ParseDuration(strings.TrimSpace(d2))
	return e1 == nil && e2 == nil && n1 < 5*time.Second && n2 < 5*time.Second
}

// dialHost dials addr from the test process, as the probe would.
func dialHost(network, addr string) string {
	c, err := net.DialTimeout(network, addr, probeTimeout)
	if err != nil {
		return errName(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(probeTimeout))
	b := make([]byte, 16)
	n, _ := c.Read(b)
	return fmt.Sprintf("ok connected, read %q", b[:n])
}

// abstractSocket listens on a host abstract UNIX socket, answering "host",
// until the test ends, and returns its address.
func (h *harness) abstractSocket() string {
	addr := "@agent-sandbox-buildtest-" + randomHex(6)
	ln, err := net.Listen("unix", addr)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("host"))
			c.Close()
		}
	}()
	return addr
}

// serve starts the probe's listener on port in sb, as root, until sb ends.
func (h *harness) serve(sb store.Sandbox, port int) {
	h.t.Helper()
	up := make(chan struct{})
	var once sync.Once
	go h.runStream(sb, "root", func(b []byte) {
		if strings.Contains(string(b), "listening") {
			once.Do(func() { close(up) })
		}
	}, "listen", strconv.Itoa(port))
	select {
	case <-up:
	case <-time.After(30 * time.Second):
		h.t.Fatalf("the listener on port %d of %s did not start", port, sb.ID)
	}
}

// dialer reaches a port of sb through the server's path (Manager.Dial).
func (h *harness) dialer(sb store.Sandbox) func(int) string {
	return func(port int) string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := h.m.Dial(ctx, sb.ID, port)
		if err != nil {
			return err.Error()
		}
		c.Close()
		return "ok connected"
	}
}

// poolTarget is a warm pool member as the test reaches it.
type poolTarget struct {
	addr string
	dial func(port int) string // from inside its network namespace, as the server does
}

// poolMember waits for the warm pool to hold a member and returns it.
func (h *harness) poolMember() poolTarget {
	h.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if h.m.Pools()["probe"].Ready > 0 {
			recs, err := h.s.Store.ListSandboxesByState(context.Background(), store.StateStarting)
			if err != nil {
				h.t.Fatal(err)
			}
			for _, rec := range recs {
				if len(rec.BackendState) == 0 {
					continue
				}
				st := h.link(rec)
				ns, err := network.Open(h.s.RunDir, rec.ID)
				if err != nil {
					h.t.Fatal(err)
				}
				return poolTarget{addr: st.Address.String(), dial: func(port int) string {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					c, err := ns.Dial(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
					if err != nil {
						return err.Error()
					}
					c.Close()
					return "ok connected"
				}}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	h.t.Fatal("the warm pool never held a member")
	return poolTarget{}
}

// leftoverSteps are the IDs of the build step sandboxes in the state dir.
func (h *harness) leftoverSteps() []string {
	entries, _ := os.ReadDir(h.s.StateDir)
	var ids []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "build-") {
			ids = append(ids, e.Name())
		}
	}
	return ids
}

// stepProcessUID returns the host Uid line's real uid of the process named
// comm in the running build step sandbox, read from the host.
func (h *harness) stepProcessUID(comm string) string {
	// The step prints its cue before its shell has forked comm: look
	// for a while.
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if uid := h.findStepProcessUID(comm); uid != "" {
			return uid
		}
	}
	return "not found"
}

func (h *harness) findStepProcessUID(comm string) string {
	for _, id := range h.leftoverSteps() {
		cg, err := cgroup.Load(h.s.CgroupParent + "/" + id)
		if err != nil {
			continue
		}
		pids, _ := cg.Procs()
		for _, pid := range pids {
			if c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(c)) != comm {
				continue
			}
			f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
			if err != nil {
				continue
			}
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if v, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
					f.Close()
					return strings.Join(strings.Fields(v), " ")
				}
			}
			f.Close()
		}
	}
	return ""
}
