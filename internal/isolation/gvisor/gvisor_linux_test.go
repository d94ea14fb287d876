package gvisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/guest"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/isolationtest"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail/jailtest"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
	"golang.org/x/sys/unix"
)

var scratch string

var testCgroupParent = fmt.Sprintf("agent-sandbox-gvisortest-%d", os.Getpid())

func TestMain(m *testing.M) {
	var err error
	scratch, err = os.MkdirTemp("", "gvisortest")
	if err != nil {
		panic(err)
	}
	code := m.Run()
	jailtest.Release(filepath.Join(scratch, "run"), testCgroupParent)
	// runsc makes the groups in every v1 hierarchy, the parent among them.
	if err := removeRuntimeCgroups(testCgroupParent); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	if err := os.RemoveAll(scratch); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// testPoolPrefix is away from the default pool and the other backends'
// tests'.
var testPoolPrefix = netip.MustParsePrefix("10.203.255.0/24")

// The built pieces every test shares, made once.
var (
	buildOnce sync.Once
	built     struct {
		envd, init, rootfs string
		err                error
	}
)

func buildPieces() {
	dir := filepath.Join(scratch, "pieces")
	b := &built
	if b.err = os.MkdirAll(dir, 0o755); b.err != nil {
		return
	}
	if b.envd, b.err = jailtest.BuildEnvd(dir); b.err != nil {
		return
	}
	if b.init, b.err = jailtest.BuildCommand(dir, "gvinit"); b.err != nil {
		return
	}
	b.rootfs = filepath.Join(dir, "rootfs")
	if b.err = jailtest.BuildRootfs(b.rootfs); b.err != nil {
		return
	}
	dmesg, err := exec.LookPath("dmesg")
	if err != nil {
		b.err = err
		return
	}
	b.err = jailtest.AddBinary(b.rootfs, dmesg, "usr/bin/dmesg", 0o755)
}

// newTestBackend returns a gvisor backend with networking; what it
// leaves by design (the firewall table, parent cgroups, mounts) goes
// when the test ends.
func newTestBackend(t *testing.T, opts ...func(*Config)) *Backend {
	t.Helper()
	testenv.RequireRoot(t)
	_, err := exec.LookPath("runsc")
	testenv.Require(t, err == nil, "runsc (Debian's runsc package): run scripts/install-deps.sh")
	buildOnce.Do(buildPieces)
	if built.err != nil {
		t.Fatal(built.err)
	}
	pool, err := network.NewPool(testPoolPrefix)
	if err != nil {
		t.Fatal(err)
	}
	host := jailtest.FirewalledNetwork(t, filepath.Join(scratch, "run"), pool)
	return newBackendOn(t, host, opts...)
}

// newBackendOn returns another backend on the same host networking, as
// a restarted server makes.
func newBackendOn(t *testing.T, host *network.Host, opts ...func(*Config)) *Backend {
	t.Helper()
	cfg := Config{
		StateDir:     filepath.Join(scratch, "gvisor"),
		Log:          slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
		Network:      host,
		Init:         built.init,
		CgroupParent: testCgroupParent,
	}
	for _, o := range opts {
		o(&cfg)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var (
	idMu  sync.Mutex
	idSeq int
)

func testSpec() isolation.Spec {
	idMu.Lock()
	idSeq++
	n := idSeq
	idMu.Unlock()
	return isolation.Spec{
		ID:              fmt.Sprintf("g%d-%d", os.Getpid(), n),
		RootFS:          built.rootfs,
		EnvdPath:        built.envd,
		Hostname:        "sbx-gvisor",
		EnvdAccessToken: fmt.Sprintf("token-%d-secret", n),
		Resources:       isolation.Resources{CPUCount: 1, MemoryMB: 256, DiskSizeMB: 256},
	}
}

// start starts spec, waits for envd as the manager does, and stops the
// sandbox when the test ends.
func start(t *testing.T, b *Backend, spec isolation.Spec) *Instance {
	t.Helper()
	return isolationtest.Start(t, b, spec, 60*time.Second, func(isolation.Instance) string { return b.quoteLog(spec.ID) }).(*Instance)
}

func sh(t *testing.T, inst *Instance, token, script string) string {
	t.Helper()
	return strings.TrimSpace(isolationtest.Sh(t, inst, token, script))
}

// TestSandbox starts a sandbox and checks what runs in it and how: the
// gVisor kernel, our init, the confinement, the token, the network
// pieces, the disk.
func TestSandbox(t *testing.T) {
	b := newTestBackend(t)
	spec := testSpec()
	inst := start(t, b, spec)
	tok := spec.EnvdAccessToken
	t.Logf("platform %s", b.Platform())

	t.Run("gVisor kernel", func(t *testing.T) {
		// The host's kernel is the positive control: the sandbox sees another.
		host, err := exec.Command("uname", "-r").Output()
		if err != nil {
			t.Fatal(err)
		}
		got := sh(t, inst, tok, "uname -r")
		if got == "" || got == strings.TrimSpace(string(host)) {
			t.Errorf("uname -r in the sandbox = %q, the host's is %q: want gVisor's", got, strings.TrimSpace(string(host)))
		}
		// The seccomp deny list refuses syslog(2) to the sandbox's
		// processes, as in every backend; a process runsc starts beside
		// init is not under it.
		if r := isolationtest.Run(t, inst, "root", tok, "dmesg"); r.Exit == 0 {
			t.Errorf("dmesg under envd: exit 0, want syslog refused by the deny list: %s", r.Stdout)
		}
		out, err := b.runsc(context.Background(), inst.ns, b.dir(spec.ID), "exec", spec.ID, "/usr/bin/dmesg")
		if err != nil || !strings.Contains(string(out), "Starting gVisor") {
			t.Errorf("dmesg (runsc exec) does not show gVisor's kernel starting: %v\n%s", err, out)
		}
	})
	t.Run("init", func(t *testing.T) {
		if got := sh(t, inst, tok, "tr '\\0' ' ' < /proc/1/cmdline"); got != initPath {
			t.Errorf("/proc/1/cmdline = %q, want %s", got, initPath)
		}
		if got := sh(t, inst, tok, "cat /proc/sys/kernel/hostname"); got != "sbx-gvisor" {
			t.Errorf("hostname = %q", got)
		}
		if got, want := sh(t, inst, tok, "grep nameserver /etc/resolv.conf"), "nameserver "+inst.state.Gateway.String(); got != want {
			t.Errorf("resolv.conf: %q, want %q", got, want)
		}
	})
	t.Run("confined", func(t *testing.T) {
		var bnd uint64
		fmt.Sscanf(sh(t, inst, tok, "set -- $(grep CapBnd /proc/self/status); echo $2"), "%x", &bnd)
		// runsc takes CAP_NET_RAW away on top (no --net-raw): no raw
		// sockets, which with host networking would be the host's.
		if want := guest.KeptCapsMask() &^ (1 << unix.CAP_NET_RAW); bnd != want {
			t.Errorf("CapBnd of a root shell = %#x, want %#x", bnd, want)
		}
		if got := sh(t, inst, tok, "set -- $(grep Seccomp: /proc/self/status); echo $2"); got != "2" {
			t.Errorf("Seccomp of a root shell = %q, want 2 (filter)", got)
		}
	})
	t.Run("userland", func(t *testing.T) {
		// Debian 12's coreutils stat every file with statx(AT_NO_AUTOMOUNT),
		// which this runsc refuses (the probe says): the statx shim makes
		// up for it.
		if !b.probed.StatxNoAutomountRefused {
			// Not a CI requirement: this runsc takes statx as Linux does,
			// and there is nothing to make up for.
			t.Skip("this runsc takes statx(AT_NO_AUTOMOUNT)")
		}
		if got := sh(t, inst, tok, "ls /usr/bin | grep -c '^bash$'; stat -c %s /etc/hosts; head -1 /etc/ld.so.preload"); got != "1\n20\n"+shimPath {
			t.Errorf("ls, stat and the preload: %q, want 1, /etc/hosts's 20 bytes and %s", got, shimPath)
		}
	})
	t.Run("token", func(t *testing.T) {
		resp, err := isolationtest.EnvdClient(inst).Post("http://envd/process.Process/List", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("envd without its access token: %s, want 401", resp.Status)
		}
		// The token is looked for as a pattern in a file, so that no
		// command line here holds it whole; the positive control is the
		// pattern file itself.
		half := len(tok) / 2
		sh(t, inst, tok, fmt.Sprintf("printf '%%s%%s' '%s' '%s' > /tmp/pat", tok[:half], tok[half:]))
		if got := sh(t, inst, tok, "grep -c -f /tmp/pat /tmp/pat"); got != "1" {
			t.Fatalf("grep does not find the token in the pattern file: %q", got)
		}
		if got := sh(t, inst, tok, "cat /proc/[0-9]*/cmdline /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c -f /tmp/pat; true"); got != "0" {
			t.Errorf("the token is in %s command lines or environments in the sandbox", got)
		}
		// init read its configuration, the token with it, from its stdin
		// to the end and put /dev/null there.
		if got := sh(t, inst, tok, "ls -l /proc/1/fd/0"); !strings.HasSuffix(got, "-> /dev/null") {
			t.Errorf("init's stdin is %q, want /dev/null", got)
		}
	})
	t.Run("disk", func(t *testing.T) {
		before, err := os.ReadDir(built.rootfs)
		if err != nil {
			t.Fatal(err)
		}
		sh(t, inst, tok, "dd if=/dev/zero of=/root/blob bs=1M count=16 conv=fsync 2>/dev/null")
		st, err := inst.Stats(context.Background())
		if err != nil || st.DiskUsed < 16<<20 || st.DiskTotal == 0 || st.MemUsed == 0 {
			t.Errorf("Stats = %+v, %v; want the disk's 16 MiB and the sandbox's memory", st, err)
		}
		after, err := os.ReadDir(built.rootfs)
		if err != nil {
			t.Fatal(err)
		}
		if len(after) != len(before) {
			t.Error("the template changed")
		}
		if _, err := os.Stat(filepath.Join(built.rootfs, "root/blob")); err == nil {
			t.Error("the sandbox wrote into the template")
		}
		// The disk is bounded by its size: 256 MiB.
		r := isolationtest.Run(t, inst, "root", tok, "/bin/sh", "-c", "dd if=/dev/zero of=/root/big bs=1M count=400 2>&1; rm -f /root/big")
		if !strings.Contains(r.Stdout, "No space left") {
			t.Errorf("writing 400 MiB to a 256 MiB disk: %s", r.Stdout)
		}
	})
	t.Run("ports", func(t *testing.T) {
		if _, err := inst.Dial(context.Background(), 1); !errors.Is(err, isolation.ErrPortClosed) {
			t.Errorf("Dial to a closed port = %v, want ErrPortClosed", err)
		}
		if l := inst.Link(); l.HostIf != network.VethName(spec.ID) || !testPoolPrefix.Contains(l.Address) {
			t.Errorf("Link() = %+v", l)
		}
	})
}

func TestPauseResume(t *testing.T) {
	b := newTestBackend(t)
	spec := testSpec()
	inst := start(t, b, spec)
	ctx := context.Background()
	if err := inst.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := inst.Dial(ctx, isolation.EnvdPort); !errors.Is(err, isolation.ErrPaused) {
		t.Errorf("Dial while paused = %v, want ErrPaused", err)
	}
	if st, err := b.state(ctx, inst.ns, spec.ID); err != nil || st.Status != "paused" {
		t.Errorf("runsc state while paused = %+v, %v", st, err)
	}
	if err := inst.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, inst, spec.EnvdAccessToken, "echo back"); got != "back" {
		t.Errorf("after resume: %q", got)
	}
}

func TestAdoptAndCleanup(t *testing.T) {
	b := newTestBackend(t)
	spec := testSpec()
	inst := start(t, b, spec)
	sh(t, inst, spec.EnvdAccessToken, "echo kept > /root/mark")

	// A restarted server: another backend adopts the sandbox from its state.
	b2 := newBackendOn(t, b.net)
	adopted, err := b2.Adopt(context.Background(), spec.ID, inst.State())
	if err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	if got := sh(t, adopted.(*Instance), spec.EnvdAccessToken, "cat /root/mark"); got != "kept" {
		t.Errorf("adopted sandbox: %q, want the file written before", got)
	}
	if _, err := b2.Adopt(context.Background(), spec.ID, []byte(`{"pid":1,"start":1}`)); !errors.Is(err, isolation.ErrGone) {
		t.Errorf("Adopt with another process's pid = %v, want ErrGone", err)
	}
	if ids, err := b2.Leftovers(nil); err != nil || !strings.Contains(strings.Join(ids, " "), spec.ID) {
		t.Errorf("Leftovers(nil) = %v, %v; want %s among them", ids, err, spec.ID)
	}
	// The server died without stopping it: Cleanup from the id alone.
	if err := b2.Cleanup(context.Background(), spec.ID, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-adopted.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the adopted sandbox still runs after Cleanup")
	}
	assertGone(t, b2, spec.ID)
}

// TestExit kills envd from inside: the sandbox ends by itself, with init's
// word on why.
func TestExit(t *testing.T) {
	b := newTestBackend(t)
	spec := testSpec()
	inst := start(t, b, spec)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = isolationtest.RunContext(ctx, inst, "root", spec.EnvdAccessToken, "/bin/sh", "-c", "kill -9 $PPID")
	select {
	case <-inst.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the sandbox still runs after its envd was killed")
	}
	if e := inst.Exit(); !strings.Contains(e.Reason, "envd exited: killed by signal SIGKILL") || e.OOM {
		t.Errorf("Exit() = %+v, want init's word that envd was killed", e)
	}
}

// assertGone checks that nothing of sandbox id is left on the host.
func assertGone(t *testing.T, b *Backend, id string) {
	t.Helper()
	if _, err := os.Lstat(filepath.Join(network.Dir(b.net.RunDir()), id)); err == nil {
		t.Errorf("netns file of %s left", id)
	}
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range entries {
		if _, err := os.Lstat(filepath.Join("/sys/fs/cgroup", e.Name(), b.cgroupName(id))); err == nil {
			t.Errorf("cgroup %s/%s left", e.Name(), b.cgroupName(id))
		}
	}
	if _, err := os.Lstat(b.dir(id)); err == nil {
		t.Errorf("sandbox dir of %s left", id)
	}
	if ids, _ := b.Leftovers(nil); strings.Contains(strings.Join(ids, " "), id) {
		t.Errorf("Leftovers still lists %s", id)
	}
}

// TestLimits checks the quotas: what the sandbox sees of its CPUs and
// memory, and its tasks held by the host's cgroup.
func TestLimits(t *testing.T) {
	b := newTestBackend(t)
	spec := testSpec()
	spec.Resources.MemoryMB = 128
	inst := start(t, b, spec)
	tok := spec.EnvdAccessToken
	var memKB int
	fmt.Sscan(sh(t, inst, tok, "set -- $(grep MemTotal /proc/meminfo); echo $2"), &memKB)
	if want := (128 + sentryMemoryMB) << 10; memKB != want {
		t.Errorf("MemTotal %d kB, want the cgroup's %d kB", memKB, want)
	}
	// runsc's --cpu-num-from-quota shows at least 2.
	if got := sh(t, inst, tok, "nproc"); got != "2" {
		t.Errorf("nproc = %q with a quota of 1 CPU, want 2", got)
	}
	st, err := inst.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("idle sandbox: host memory %d MiB", st.MemUsed>>20)

	// Over its memory: the host's OOM killer ends a process of gVisor's
	// kernel, and with it the whole sandbox.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, _ = isolationtest.RunContext(ctx, inst, "root", tok, "/bin/sh", "-c", "tail /dev/zero")
	select {
	case <-inst.Done():
	case <-ctx.Done():
		t.Fatal("the sandbox runs on after tail /dev/zero in 128 MiB")
	}
	if e := inst.Exit(); !e.OOM || !strings.Contains(e.Reason, "memory limit") {
		t.Errorf("Exit() = %+v, want OOM", e)
	}
}

// TestSnapshotBlocked checks that the backend offers no snapshot, and
// why: runsc refuses to checkpoint a sandbox with host networking, and
// the refusal leaves the sandbox running. If a runsc ever accepts it,
// this test fails and the backend can offer memory snapshots.
func TestSnapshotBlocked(t *testing.T) {
	b := newTestBackend(t)
	if k := b.Capabilities().Snapshot; k != isolation.NoSnapshot {
		t.Fatalf("Capabilities().Snapshot = %s, want none", k)
	}
	spec := testSpec()
	inst := start(t, b, spec)
	ctx := context.Background()
	if err := inst.Snapshot(ctx, t.TempDir(), isolation.MemorySnapshot); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Snapshot = %v, want ErrUnsupported", err)
	}
	from := testSpec()
	from.Snapshot = &isolation.SnapshotSource{Dir: t.TempDir(), Kind: isolation.MemorySnapshot}
	if _, err := b.Start(ctx, from); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Start from a snapshot = %v, want ErrUnsupported", err)
	}
	assertGone(t, b, from.ID)

	img := t.TempDir()
	_, err := b.runsc(ctx, inst.ns, b.dir(spec.ID), "checkpoint", "--image-path="+img, spec.ID)
	if err == nil || !strings.Contains(err.Error(), "checkpoint not supported when using hostinet") {
		t.Errorf("runsc checkpoint = %v, want runsc's refusal for host networking", err)
	}
	t.Logf("runsc checkpoint: %v", err)
	if got := sh(t, inst, spec.EnvdAccessToken, "echo alive"); got != "alive" {
		t.Errorf("the sandbox after the refused checkpoint: %q", got)
	}
}

// TestStartRollsBack fails a start half-way (a template that is not
// there, found by the launcher): the error says why and nothing is left.
func TestStartRollsBack(t *testing.T) {
	b := newTestBackend(t)
	spec := testSpec()
	spec.RootFS = filepath.Join(scratch, "no-such-template")
	inst, err := b.Start(context.Background(), spec)
	if err == nil {
		inst.Stop(context.Background())
		t.Fatal("Start over a missing template succeeded")
	}
	if !strings.Contains(err.Error(), "no-such-template") {
		t.Errorf("error %q does not name the missing template", err)
	}
	assertGone(t, b, spec.ID)
}
