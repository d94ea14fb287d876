package vm

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
	"syscall"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/isolationtest"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail/jailtest"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/vm/kernel"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
	"github.com/agent-sandbox/agent-sandbox/internal/volume"
)

var scratch string

var testCgroupParent = fmt.Sprintf("agent-sandbox-vmtest-%d", os.Getpid())

func TestMain(m *testing.M) {
	var err error
	scratch, err = os.MkdirTemp("", "vmtest")
	if err != nil {
		panic(err)
	}
	code := m.Run()
	jailtest.Release(filepath.Join(scratch, "run"), testCgroupParent)
	if err := os.RemoveAll(scratch); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// testPoolPrefix is away from the default pool and the jail tests'.
var testPoolPrefix = netip.MustParsePrefix("10.202.255.0/24")

// The built pieces every test shares, made once.
var (
	buildOnce sync.Once
	built     struct {
		envd, init, image string
		err               error
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
	if b.init, b.err = jailtest.BuildCommand(dir, "vminit"); b.err != nil {
		return
	}
	root := filepath.Join(dir, "rootfs")
	if b.err = jailtest.BuildRootfs(root); b.err != nil {
		return
	}
	b.image = filepath.Join(dir, "rootfs.ext4")
	out, err := exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", "-d", root, b.image, "96M").CombinedOutput()
	if err != nil {
		b.err = fmt.Errorf("mkfs.ext4: %v: %s", err, out)
	}
}

// newTestBackend returns a vm backend with networking; what it leaves by
// design (the firewall table, parent cgroups, mounts) goes when the test
// ends.
func newTestBackend(t *testing.T, opts ...func(*Config)) *Backend {
	t.Helper()
	testenv.RequireRoot(t)
	_, err := kernel.Open(kernel.DefaultDir)
	testenv.Require(t, err == nil, fmt.Sprintf("the guest kernel: %v", err))
	_, err = exec.LookPath("qemu-system-x86_64")
	testenv.Require(t, err == nil, "QEMU (qemu-system-x86): run scripts/install-deps.sh --vm")
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
		StateDir:     filepath.Join(scratch, "vms"),
		CacheDir:     filepath.Join(scratch, "boot"),
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

var idSeq int

func testSpec() isolation.Spec {
	idSeq++
	return isolation.Spec{
		ID:              fmt.Sprintf("v%d-%d", os.Getpid(), idSeq),
		RootFS:          "/nonexistent", // the VM boots RootImage
		RootImage:       built.image,
		EnvdPath:        built.envd,
		Hostname:        "sbx-vm",
		EnvdAccessToken: fmt.Sprintf("token-%d", idSeq),
		Resources:       isolation.Resources{CPUCount: 1, MemoryMB: 256, DiskSizeMB: 512},
	}
}

// start starts spec, waits for envd as the manager does, and stops the
// sandbox when the test ends.
func start(t *testing.T, b *Backend, spec isolation.Spec) *Instance {
	t.Helper()
	return isolationtest.Start(t, b, spec, 90*time.Second, func(inst isolation.Instance) string {
		return "; console:\n" + string(inst.(*Instance).console.bytes())
	}).(*Instance)
}

func sh(t *testing.T, inst *Instance, token, script string) string {
	t.Helper()
	return strings.TrimSpace(isolationtest.Sh(t, inst, token, script))
}

func TestBoot(t *testing.T) {
	b := newTestBackend(t)
	spec := testSpec()
	inst := start(t, b, spec)
	tok := spec.EnvdAccessToken

	// Its own kernel, our init as PID 1, module loading closed.
	if got, want := sh(t, inst, tok, "uname -r"), b.boot.kernel.Version; got != want {
		t.Errorf("uname -r = %q, want the guest kernel %q", got, want)
	}
	if got := sh(t, inst, tok, "tr '\\0' ' ' < /proc/1/cmdline"); got != "/init" {
		t.Errorf("/proc/1/cmdline = %q, want /init", got)
	}
	if got := sh(t, inst, tok, "cat /proc/sys/kernel/modules_disabled"); got != "1" {
		t.Errorf("modules_disabled = %q, want 1", got)
	}
	if got := sh(t, inst, tok, "grep -c '^virtio_blk ' /proc/modules"); got != "1" {
		t.Errorf("virtio_blk loaded %q times, want 1 (by init)", got)
	}
	// QEMU is confined: its own mount namespace, rooted where it sees
	// nothing of the host's but /usr and its own /proc and /dev.
	self, _ := os.Readlink("/proc/self/ns/mnt")
	if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", inst.pid)); err != nil || ns == self {
		t.Errorf("QEMU's mount namespace %q (%v) is the server's %q", ns, err, self)
	}
	qroot, err1 := os.Stat(fmt.Sprintf("/proc/%d/root", inst.pid))
	broot, err2 := os.Stat(b.root)
	if err1 != nil || err2 != nil || !os.SameFile(qroot, broot) {
		t.Errorf("QEMU's root is not %s (%v, %v)", b.root, err1, err2)
	}
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/root", inst.pid)); err == nil {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		if got := strings.Join(names, " "); got != ".complete bin dev lib lib64 proc usr" {
			t.Errorf("QEMU's root holds %s", got)
		}
	}
	// Its clock keeps the host's time: its TSC is the host's, at the rate
	// the kernel was told.
	uptime := func() (float64, time.Time) {
		var up float64
		fmt.Sscan(sh(t, inst, tok, "read up idle < /proc/uptime; echo $up"), &up)
		return up, time.Now()
	}
	u0, h0 := uptime()
	time.Sleep(5 * time.Second)
	u1, h1 := uptime()
	if r := (u1 - u0) / h1.Sub(h0).Seconds(); r < 0.97 || r > 1.03 {
		t.Errorf("the guest's clock ran %.2f× the host's over %v", r, h1.Sub(h0))
	}
	// Its quotas: CPUs, memory, the root file system grown to the disk size.
	if got := sh(t, inst, tok, "nproc"); got != "1" {
		t.Errorf("nproc = %q, want 1", got)
	}
	var memKB, rootKB int
	fmt.Sscan(sh(t, inst, tok, "set -- $(grep MemTotal /proc/meminfo); echo $2"), &memKB)
	if memKB < 200<<10 || memKB > 256<<10 {
		t.Errorf("MemTotal %d kB, want about 256 MiB", memKB)
	}
	fmt.Sscan(sh(t, inst, tok, "set -- $(df -k / | tail -1); echo $2"), &rootKB)
	if rootKB < 400<<10 {
		t.Errorf("root file system %d kB, want it grown to about the 512 MiB disk", rootKB)
	}
	if got := sh(t, inst, tok, "cat /proc/sys/kernel/hostname"); got != "sbx-vm" {
		t.Errorf("hostname = %q", got)
	}
	// The envd token is required, and gone from where the guest could read it.
	resp, err := isolationtest.EnvdClient(inst).Post("http://envd/process.Process/List", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("envd without its access token: %s, want 401", resp.Status)
	}
	if got := sh(t, inst, tok, "ls /config.json 2>&1; grep -rl "+tok+" /proc/cmdline /proc/1/environ 2>/dev/null; true"); !strings.Contains(got, "No such file") || strings.Contains(got, "/proc") {
		t.Errorf("the boot configuration is readable in the guest: %q", got)
	}
	// Disk writes land in the overlay, not in the template image.
	before, _ := os.ReadFile(built.image)
	sh(t, inst, tok, "dd if=/dev/zero of=/root/blob bs=1M count=8 oflag=direct 2>/dev/null")
	after, _ := os.ReadFile(built.image)
	if string(before) != string(after) {
		t.Error("the template image changed")
	}
	st, err := inst.Stats(context.Background())
	if err != nil || st.DiskUsed < 8<<20 || st.MemUsed == 0 {
		t.Errorf("Stats = %+v, %v; want the overlay's 8 MiB and QEMU's memory", st, err)
	}
	t.Logf("host memory of the VM: %d MiB (cgroup)", st.MemUsed>>20)
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
	if s, err := inst.qmp.Status(ctx); err != nil || s.Running {
		t.Errorf("QEMU status while paused = %+v, %v", s, err)
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

	// A restarted server: another backend adopts the VM from its state.
	// QEMU's monitor and console take one client at a time; the first
	// server's connections went with it.
	inst.qmp.Close()
	inst.consoleConn.Close()
	b2 := newBackendOn(t, b.net)
	adopted, err := b2.Adopt(context.Background(), spec.ID, inst.State())
	if err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	if got := sh(t, adopted.(*Instance), spec.EnvdAccessToken, "cat /root/mark"); got != "kept" {
		t.Errorf("adopted VM: %q, want the file written before", got)
	}
	// The new server reaches the guest's init over the console again.
	if err := adopted.Snapshot(context.Background(), t.TempDir(), isolation.FilesSnapshot); err != nil {
		t.Errorf("a files snapshot (the guest freezes its disk) of the adopted VM: %v", err)
	}
	if _, err := b2.Adopt(context.Background(), spec.ID, []byte(`{"pid":1,"start":1}`)); !errors.Is(err, isolation.ErrGone) {
		t.Errorf("Adopt with another process's pid = %v, want ErrGone", err)
	}
	// The server died without stopping it: Cleanup from the id alone.
	if err := b2.Cleanup(context.Background(), spec.ID, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-adopted.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the adopted VM still runs after Cleanup")
	}
	assertGone(t, b2, spec.ID)
}

// TestGuestPanic crashes one guest's kernel as its root: that sandbox ends
// with the panic as its reason; a neighbour keeps answering.
func TestGuestPanic(t *testing.T) {
	b := newTestBackend(t)
	victim, neighbour := testSpec(), testSpec()
	v := start(t, b, victim)
	n := start(t, b, neighbour)
	// The command never ends: its kernel goes with it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = isolationtest.RunContext(ctx, v, "root", victim.EnvdAccessToken, "/bin/sh", "-c", "echo c > /proc/sysrq-trigger")
	select {
	case <-v.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the crashed guest's VM still runs")
	}
	if r := v.Exit().Reason; !strings.Contains(r, "guest kernel panic") {
		t.Errorf("exit reason %q, want the guest kernel panic", r)
	}
	if got := sh(t, n, neighbour.EnvdAccessToken, "echo alive"); got != "alive" {
		t.Errorf("neighbour: %q", got)
	}
}

// assertGone checks that nothing of sandbox id is left on the host.
func assertGone(t *testing.T, b *Backend, id string) {
	t.Helper()
	if _, err := os.Lstat(filepath.Join(network.Dir(b.net.RunDir()), id)); err == nil {
		t.Errorf("netns file of %s left", id)
	}
	for _, d := range jailtest.CgroupParentDirs(b.cfg.CgroupParent) {
		if _, err := os.Lstat(filepath.Join(d, id)); err == nil {
			t.Errorf("cgroup %s/%s left", d, id)
		}
	}
	if _, err := os.Lstat(b.dir(id)); err == nil {
		t.Errorf("sandbox dir of %s left", id)
	}
	if ids, _ := b.Leftovers(nil); len(ids) > 0 && ids[0] == id {
		t.Errorf("Leftovers still lists %s", id)
	}
}

func TestSnapshotBoot(t *testing.T) {
	b := newTestBackend(t, func(c *Config) { c.Snapshots = true })
	t.Cleanup(func() { b.Close() }) // a making under way ends before the backend's network does
	first := testSpec()
	start(t, b, first)
	b.snaps.wg.Wait()
	p, err := b.plan(context.Background(), first)
	if err != nil {
		t.Fatal(err)
	}
	key, err := b.snapshotKey(p)
	if err != nil {
		t.Fatal(err)
	}
	snap := b.snaps.get(key)
	if snap == nil {
		t.Fatalf("no snapshot made after the first sandbox of its shape")
	}
	if _, err := os.Lstat(b.dir("snapshot-" + key)); err == nil {
		t.Errorf("the VM the snapshot was saved from is left")
	}

	// Two sandboxes from it, each its own.
	type clone struct {
		spec isolation.Spec
		inst *Instance
	}
	var clones []clone
	for range 2 {
		spec := testSpec()
		spec.Hostname = spec.ID
		t0 := time.Now()
		inst := start(t, b, spec)
		t.Logf("create from the snapshot to envd ready: %v", time.Since(t0))
		clones = append(clones, clone{spec, inst})
	}
	seen := map[string]bool{}
	for _, c := range clones {
		tok := c.spec.EnvdAccessToken
		if got := sh(t, c.inst, tok, "uname -n"); got != c.spec.ID {
			t.Errorf("hostname %q, want %q", got, c.spec.ID)
		}
		if got := sh(t, c.inst, tok, "grep -c ' "+c.inst.state.Address.String()+"$' /proc/net/fib_trie"); got == "0" {
			t.Errorf("the guest does not have its address %s", c.inst.state.Address)
		}
		if got, want := sh(t, c.inst, tok, "grep nameserver /etc/resolv.conf"), "nameserver "+c.inst.state.Gateway.String(); got != want {
			t.Errorf("resolv.conf: %q, want %q", got, want)
		}
		var guestNow int64
		fmt.Sscan(sh(t, c.inst, tok, "touch /tmp/now && stat -c %Y /tmp/now"), &guestNow)
		if d := time.Since(time.Unix(guestNow, 0)); d.Abs() > 5*time.Second {
			t.Errorf("the guest's clock is %v off", d)
		}
		u := sh(t, c.inst, tok, "cat /proc/sys/kernel/random/uuid")
		if seen[u] {
			t.Errorf("two clones drew the same random UUID %s: the pool was not reseeded", u)
		}
		seen[u] = true
		// The saved envd's token is replaced.
		if code := envdStatus(t, c.inst, snap.Token); code != http.StatusUnauthorized {
			t.Errorf("the snapshot's token: status %d, want 401", code)
		}
	}
}

// envdStatus is the status of a process list request to inst's envd with
// token.
func envdStatus(t *testing.T, inst *Instance, token string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://envd/process.Process/List", strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Access-Token", token)
	resp, err := isolationtest.EnvdClient(inst).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestSandboxSnapshot saves a running sandbox through the contract and
// starts sandboxes from the save: from a memory snapshot, its processes
// go on with their memory; from the files alone, it boots afresh over
// them. The saved sandbox runs on, and each is independent.
func TestSandboxSnapshot(t *testing.T) {
	b := newTestBackend(t)
	ctx := context.Background()
	parentSpec := testSpec()
	parent := start(t, b, parentSpec)
	tok := parentSpec.EnvdAccessToken
	sh(t, parent, tok, "echo saved > /root/file")
	// A counter that lives in a shell's memory, written out each tick.
	sh(t, parent, tok, "(i=0; while :; do i=$((i+1)); echo $i > /root/count; sleep 0.1; done) </dev/null >/dev/null 2>&1 & echo $! > /root/counter.pid")
	time.Sleep(time.Second)

	snaps := map[isolation.SnapshotKind]string{}
	for _, kind := range []isolation.SnapshotKind{isolation.MemorySnapshot, isolation.FilesSnapshot} {
		dir := t.TempDir()
		t0 := time.Now()
		if err := parent.Snapshot(ctx, dir, kind); err != nil {
			t.Fatalf("%s snapshot: %v", kind, err)
		}
		t.Logf("%s snapshot took %v", kind, time.Since(t0))
		snaps[kind] = dir
	}
	var saved int
	fmt.Sscan(sh(t, parent, tok, "cat /root/count"), &saved)
	if got := sh(t, parent, tok, "echo runs on"); got != "runs on" {
		t.Fatalf("the saved sandbox after its snapshots: %q", got)
	}

	t.Run("memory", func(t *testing.T) {
		spec := testSpec()
		spec.Snapshot = &isolation.SnapshotSource{Dir: snaps[isolation.MemorySnapshot], Kind: isolation.MemorySnapshot, EnvdAccessToken: tok}
		t0 := time.Now()
		child := start(t, b, spec)
		t.Logf("start from the memory snapshot to envd ready: %v", time.Since(t0))
		ctok := spec.EnvdAccessToken
		if code := envdStatus(t, child, tok); code != http.StatusUnauthorized {
			t.Errorf("the saved sandbox's token in the child: status %d, want 401", code)
		}
		if got := sh(t, child, ctok, "uname -n"); got != spec.Hostname {
			t.Errorf("hostname %q, want the child's %q", got, spec.Hostname)
		}
		// The counter process is the saved one, going on from its memory.
		pid := sh(t, child, ctok, "cat /root/counter.pid")
		if got := sh(t, child, ctok, "test -d /proc/"+pid+" && echo alive || echo gone"); got != "alive" {
			t.Fatalf("the saved counter process %s in the child: %s", pid, got)
		}
		var a, c int
		fmt.Sscan(sh(t, child, ctok, "cat /root/count"), &a)
		time.Sleep(500 * time.Millisecond)
		fmt.Sscan(sh(t, child, ctok, "cat /root/count"), &c)
		if a < saved-10 || c <= a {
			t.Errorf("the counter in the child went %d → %d; it was at %d in the parent after the snapshot", a, c, saved)
		}
		// Independent of the parent both ways.
		sh(t, child, ctok, "echo child > /root/file")
		if got := sh(t, parent, tok, "cat /root/file"); got != "saved" {
			t.Errorf("the parent's file after the child wrote its own: %q", got)
		}
	})
	t.Run("files", func(t *testing.T) {
		spec := testSpec()
		spec.Snapshot = &isolation.SnapshotSource{Dir: snaps[isolation.FilesSnapshot], Kind: isolation.FilesSnapshot}
		child := start(t, b, spec)
		ctok := spec.EnvdAccessToken
		if got := sh(t, child, ctok, "cat /root/file"); got != "saved" {
			t.Errorf("the saved file in the child: %q", got)
		}
		pid := sh(t, child, ctok, "cat /root/counter.pid")
		// The pid may be anyone's in a fresh boot (this probe's own, even):
		// the saved process is the one running the counter's loop.
		if got := sh(t, child, ctok, "test -d /proc/"+pid+" && tr '\\0' ' ' < /proc/"+pid+"/cmdline; echo"); strings.Contains(got, "while") {
			t.Errorf("a files snapshot's child runs the saved process %s: %q", pid, got)
		}
	})
	t.Run("refused", func(t *testing.T) {
		spec := testSpec()
		spec.Resources.MemoryMB = 384
		spec.Snapshot = &isolation.SnapshotSource{Dir: snaps[isolation.MemorySnapshot], Kind: isolation.MemorySnapshot, EnvdAccessToken: tok}
		if inst, err := b.Start(ctx, spec); err == nil {
			inst.Stop(ctx)
			t.Fatal("a memory snapshot started in a VM of another memory size")
		} else if !strings.Contains(err.Error(), "restores only into its own shape") {
			t.Errorf("error %q does not say why", err)
		}
		assertGone(t, b, spec.ID)
		spec = testSpec()
		spec.Snapshot = &isolation.SnapshotSource{Dir: snaps[isolation.FilesSnapshot], Kind: isolation.MemorySnapshot}
		if inst, err := b.Start(ctx, spec); err == nil {
			inst.Stop(ctx)
			t.Fatal("a files snapshot restored as a memory one")
		}
	})
}

// TestVolume mounts a volume's image in a VM (as the volume package makes
// and lends it): read-write, without devices or setuid, files owned as the
// guest's users write them. Paused to disk (its memory saved, the VM
// stopped) and restored over the same image, the guest has what it wrote,
// cached or not; a restore with other disks is refused. Stopped, every
// write is on the image, which the host then mounts again.
func TestVolume(t *testing.T) {
	b := newTestBackend(t)
	ctx := context.Background()
	vols := &volume.ImageStorage{Dir: filepath.Join(scratch, "volumes"), MountDir: filepath.Join(scratch, "volume-mounts")}
	vid := fmt.Sprintf("vol-%d", os.Getpid())
	if err := vols.Create(ctx, vid, 64<<20); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := vols.Remove(ctx, vid); err != nil {
			t.Errorf("removing the volume: %v", err)
		}
	})
	spec := testSpec()
	image, err := vols.Attach(ctx, vid, spec.ID)
	if err != nil {
		t.Fatal(err)
	}
	spec.Volumes = []isolation.VolumeMount{{Image: image, Target: "/mnt/vol"}}
	inst := start(t, b, spec)
	tok := spec.EnvdAccessToken

	if got := sh(t, inst, tok, "grep ' /mnt/vol ' /proc/mounts"); !strings.Contains(got, " ext4 rw,nosuid,nodev,") {
		t.Errorf("the volume's mount: %q, want ext4 rw,nosuid,nodev", got)
	}
	res := isolationtest.Run(t, inst, "user", tok, "/bin/sh", "-c", "echo by-user > /mnt/vol/f && stat -c %u:%g /mnt/vol/f")
	if got := strings.TrimSpace(res.Stdout); res.Exit != 0 || got != "1000:1000" {
		t.Fatalf("a file user wrote on the volume: %q (exit %d, %s)", got, res.Exit, res.Stderr)
	}
	sh(t, inst, tok, "echo cached > /mnt/vol/cached")

	if err := inst.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	saved := t.TempDir()
	if err := inst.Snapshot(ctx, saved, isolation.MemorySnapshot); err != nil {
		t.Fatal(err)
	}
	if err := inst.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	other := testSpec()
	other.Snapshot = &isolation.SnapshotSource{Dir: saved, Kind: isolation.MemorySnapshot, EnvdAccessToken: tok}
	if inst, err := b.Start(ctx, other); err == nil {
		inst.Stop(ctx)
		t.Error("a memory snapshot with a volume disk restored into a VM without")
	} else if !strings.Contains(err.Error(), "volume disks") {
		t.Errorf("error %q does not say why", err)
	}
	spec.Snapshot = &isolation.SnapshotSource{Dir: saved, Kind: isolation.MemorySnapshot, EnvdAccessToken: tok}
	restored := start(t, b, spec)
	if got := sh(t, restored, tok, "cat /mnt/vol/f /mnt/vol/cached"); got != "by-user\ncached" {
		t.Errorf("the volume after a pause to disk: %q", got)
	}
	sh(t, restored, tok, "echo last > /mnt/vol/last")
	if err := restored.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	if err := vols.Detach(ctx, vid, spec.ID); err != nil {
		t.Fatal(err)
	}
	dir, err := vols.Path(ctx, vid)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"f": "by-user\n", "cached": "cached\n", "last": "last\n"} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != want {
			t.Errorf("%s on the host after the VM stopped: %q, %v; want %q", name, b, err, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "f")); err == nil {
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 1000 {
			t.Errorf("f is owned by uid %d on the host, want the guest's 1000", st.Uid)
		}
	}
}
