package jail

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/guest"
)

func TestSandbox(t *testing.T) {
	b := newTestBackend(t, nil)
	spec := testSpec(t, isolation.Resources{})
	inst := startSandbox(t, b, spec)

	t.Run("pid namespace", func(t *testing.T) {
		out := sh(t, inst, "ls /proc | grep -E '^[0-9]+$'")
		pids := strings.Fields(out)
		if len(pids) > 6 || pids[0] != "1" {
			t.Errorf("pids visible in the sandbox: %v", pids)
		}
		out = sh(t, inst, "cat /proc/1/cmdline | tr '\\0' ' '; echo; ps -e -o pid,comm")
		if !strings.Contains(out, "envd") {
			t.Errorf("ps shows no envd: %s", out)
		}
		t.Logf("ps:\n%s", out)
	})
	t.Run("hostname", func(t *testing.T) {
		if got := strings.TrimSpace(sh(t, inst, "uname -n")); got != "sbx-test" {
			t.Errorf("hostname %q", got)
		}
	})
	t.Run("host files invisible", func(t *testing.T) {
		marker := filepath.Join(os.TempDir(), "jail-marker-"+spec.ID)
		if err := os.WriteFile(marker, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(marker)
		if r := run(t, inst, "root", "/bin/cat", marker); r.exit == 0 {
			t.Errorf("sandbox reads host file %s", marker)
		}
		if r := run(t, inst, "root", "/bin/ls", "/proc/1/root/"); r.exit == 0 {
			t.Errorf("sandbox lists init's root through /proc/1/root: %s", r.stdout)
		}
	})
	t.Run("writes go to the upper", func(t *testing.T) {
		sh(t, inst, "echo changed > /etc/hosts && echo new > /newfile && rm /usr/bin/false")
		if b, _ := os.ReadFile(filepath.Join(spec.RootFS, "etc/hosts")); strings.Contains(string(b), "changed") {
			t.Error("template /etc/hosts was written")
		}
		if _, err := os.Stat(filepath.Join(spec.RootFS, "newfile")); err == nil {
			t.Error("template got /newfile")
		}
		if _, err := os.Stat(filepath.Join(spec.RootFS, "usr/bin/false")); err != nil {
			t.Error("template lost /usr/bin/false")
		}
		if got := sh(t, inst, "cat /newfile"); got != "new\n" {
			t.Errorf("read back %q", got)
		}
	})
	t.Run("envd read-only", func(t *testing.T) {
		if r := run(t, inst, "root", "/bin/sh", "-c", "echo x >> /usr/bin/envd"); r.exit == 0 {
			t.Error("root could write /usr/bin/envd")
		}
	})
	t.Run("devices", func(t *testing.T) {
		sh(t, inst, "echo x > /dev/null && head -c 4 /dev/urandom | wc -c && test -c /dev/pts/ptmx && test -d /dev/shm && touch /dev/shm/x")
		if r := run(t, inst, "root", "/bin/sh", "-c", "touch /dev/newfile"); r.exit == 0 {
			t.Error("/dev is writable")
		}
	})
	t.Run("masked proc", func(t *testing.T) {
		if got := sh(t, inst, "for f in /proc/kcore /proc/keys /proc/timer_list /proc/sched_debug; do test -e $f && cat $f; done | wc -c"); strings.TrimSpace(got) != "0" {
			t.Errorf("masked files read %s bytes", got)
		}
		if r := run(t, inst, "root", "/bin/sh", "-c", "echo 1 > /proc/sys/kernel/domainname"); r.exit == 0 {
			t.Error("/proc/sys is writable")
		}
		if r := run(t, inst, "root", "/bin/sh", "-c", "touch /sys/x"); r.exit == 0 {
			t.Error("/sys is writable")
		}
	})
	t.Run("seccomp", func(t *testing.T) {
		out := sh(t, inst, "/usr/bin/probe syscalls")
		for _, want := range []string{
			"unshare=EPERM", "unshare_ns=EPERM", "mount=EPERM", "ptrace=EPERM", "clone_newuser=EPERM",
			"clone3=ENOSYS", "keyctl=EPERM", "personality=EPERM",
		} {
			if !strings.Contains(out, want+"\n") {
				t.Errorf("want %s in:\n%s", want, out)
			}
		}
		if strings.Contains(out, "proc1root=<nil>") {
			t.Errorf("/proc/1/root opened: %s", out)
		}
	})
	t.Run("capabilities", func(t *testing.T) {
		out := sh(t, inst, "grep -E '^(CapBnd|CapEff|CapInh|CapAmb|NoNewPrivs)' /proc/self/status")
		want := "CapBnd:\t" + strings.Repeat("0", 16-len(strconv.FormatUint(guest.KeptCapsMask(), 16))) + strconv.FormatUint(guest.KeptCapsMask(), 16)
		if !strings.Contains(out, want) || !strings.Contains(out, "NoNewPrivs:\t0") || !strings.Contains(out, "CapInh:\t0000000000000000") {
			t.Errorf("status:\n%s\nwant %q, NoNewPrivs 0", out, want)
		}
		// Without no_new_privs a setuid-root program runs as root.
		if r := run(t, inst, "user", "/usr/bin/suid-id", "-u"); strings.TrimSpace(r.stdout) != "0" {
			t.Errorf("setuid id as user: euid %q %s", r.stdout, r.stderr)
		}
		if r := run(t, inst, "user", "/usr/bin/id", "-u"); strings.TrimSpace(r.stdout) != "1000" {
			t.Errorf("id as user: %q", r.stdout)
		}
	})
	t.Run("loopback service", func(t *testing.T) {
		r := run(t, inst, "root", "/bin/sh", "-c", "/usr/bin/probe listen 127.0.0.1:7001 hello >/dev/null 2>&1 &")
		if r.exit != 0 {
			t.Fatal(r)
		}
		var conn io.ReadCloser
		var err error
		for i := 0; i < 100; i++ {
			if conn, err = inst.Dial(context.Background(), 7001); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(conn)
		conn.Close()
		if string(b) != "hello" {
			t.Errorf("got %q", b)
		}
		if _, err := inst.Dial(context.Background(), 7999); !errors.Is(err, isolation.ErrPortClosed) {
			t.Errorf("Dial to a closed port: %v, want ErrPortClosed", err)
		}
	})
	t.Run("stats", func(t *testing.T) {
		ctx := context.Background()
		if _, err := inst.Stats(ctx); err != nil {
			t.Fatal(err)
		}
		s, err := inst.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("stats: %+v", s)
		if s.MemTotal != testMemoryMB<<20 || s.MemUsed == 0 || s.DiskTotal < 900<<20 || s.DiskUsed == 0 || s.ProcessesUp == 0 || s.CPUCount != testCPUCount {
			t.Errorf("implausible stats %+v", s)
		}
	})
	t.Run("pause resume", func(t *testing.T) {
		ctx := context.Background()
		sh(t, inst, "/usr/bin/probe counter /tmp/counter >/dev/null 2>&1 &")
		time.Sleep(100 * time.Millisecond)
		pidsBefore := sh(t, inst, "ls /proc | grep -E '^[0-9]+$' | sort -n")
		if err := inst.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		counterFile := filepath.Join("/proc", strconv.Itoa(inst.state.InitPid), "root/tmp/counter")
		c1, _ := os.ReadFile(counterFile)
		time.Sleep(200 * time.Millisecond)
		c2, _ := os.ReadFile(counterFile)
		if string(c1) != string(c2) || len(c1) == 0 {
			t.Errorf("counter moved while paused: %q → %q", c1, c2)
		}
		t0 := time.Now()
		if _, err := inst.Dial(ctx, isolation.EnvdPort); !errors.Is(err, isolation.ErrPaused) || time.Since(t0) > 100*time.Millisecond {
			t.Errorf("Dial while paused: %v after %v", err, time.Since(t0))
		}
		if err := inst.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		c3, _ := os.ReadFile(counterFile)
		if string(c3) == string(c2) {
			t.Errorf("counter stuck after resume at %q", c3)
		}
		pidsAfter := sh(t, inst, "ls /proc | grep -E '^[0-9]+$' | sort -n")
		// The shell and ls differ between the two listings, and come last
		// in numeric order (a lexical one put pid 100 before 81 in CI);
		// the rest stays.
		if a, b := strings.Fields(pidsBefore), strings.Fields(pidsAfter); len(a) < 3 || a[0] != b[0] || a[1] != b[1] {
			t.Errorf("pids before %v after %v", a, b)
		}
	})

	if err := inst.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := inst.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	select {
	case <-inst.Done():
	default:
		t.Error("Done not closed after Stop")
	}
	assertGone(t, b, spec.ID)
}

func TestTwoSandboxesAreSeparate(t *testing.T) {
	b := newTestBackend(t, nil)
	a := startSandbox(t, b, testSpec(t, isolation.Resources{}))
	c := startSandbox(t, b, testSpec(t, isolation.Resources{}))
	sh(t, a, "/usr/bin/probe listen 127.0.0.1:7002 from-a >/dev/null 2>&1 &")
	var err error
	for i := 0; i < 100; i++ {
		var conn io.ReadCloser
		if conn, err = a.Dial(context.Background(), 7002); err == nil {
			conn.Close()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Dial(context.Background(), 7002); !errors.Is(err, isolation.ErrPortClosed) {
		t.Errorf("other sandbox's 7002: %v, want ErrPortClosed", err)
	}
	// The same probe from a itself succeeds, so its failure from c means
	// something (bash: /bin/sh may lack /dev/tcp).
	probe := "echo > /dev/tcp/127.0.0.1/7002"
	if r := run(t, a, "root", "/bin/bash", "-c", probe); r.exit != 0 {
		t.Fatalf("probe from a itself failed (exit %d: %s)", r.exit, r.stderr)
	}
	if r := run(t, c, "root", "/bin/bash", "-c", probe); r.exit == 0 {
		t.Error("sandbox c reached a's loopback service")
	}
}

func TestLimits(t *testing.T) {
	b := newTestBackend(t, nil)
	spec := testSpec(t, isolation.Resources{MemoryMB: 128, Pids: 64, DiskSizeMB: 64})
	inst := startSandbox(t, b, spec)

	t.Run("memory", func(t *testing.T) {
		r := run(t, inst, "root", "/usr/bin/probe", "alloc", "512")
		if r.exit == 0 {
			t.Errorf("allocating 512 MB under a 128 MB limit succeeded: %s", r.stdout)
		}
		s, err := inst.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if s.OOMKills == 0 {
			t.Errorf("OOMKills = 0 (exit %d)", r.exit)
		}
		sh(t, inst, "true") // envd survived
	})
	t.Run("pids", func(t *testing.T) {
		out := sh(t, inst, "/usr/bin/probe fork 200")
		var n int
		if _, err := fmtSscanf(out, "started=%d", &n); err != nil || n >= 64 {
			t.Errorf("fork under a pids limit of 64: %s", out)
		}
		t.Logf("%s", out)
	})
	t.Run("disk", func(t *testing.T) {
		out := sh(t, inst, "/usr/bin/probe fill /var/tmp/big")
		if !strings.Contains(out, "no space left on device") {
			t.Errorf("filling the disk: %s", out)
		}
		t.Logf("%s", out)
		s, _ := inst.Stats(context.Background())
		if s.DiskTotal > 64<<20 || s.DiskUsed < s.DiskTotal*9/10 {
			t.Errorf("disk stats after filling: used %d of %d", s.DiskUsed, s.DiskTotal)
		}
	})
	t.Run("oom exit", func(t *testing.T) {
		// The sandbox dies (init killed) with OOM kills recorded.
		if err := killPid(inst.state.InitPid); err != nil {
			t.Fatal(err)
		}
		select {
		case <-inst.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("Done not closed after init died")
		}
		if ex := inst.Exit(); !ex.OOM {
			t.Errorf("Exit = %+v, want OOM", ex)
		}
	})
}

// TestNoNewPrivs runs a setuid-root program as user with Config.NoNewPrivs
// (serve --no-new-privs) off and on: off it runs as root, as sudo does in
// the templates; on it keeps the caller's uid. In both the probe first
// checks that the program is setuid root, so a copy that lost the bit
// cannot pass for "blocked".
func TestNoNewPrivs(t *testing.T) {
	for _, c := range []struct {
		on         bool
		status     string
		euidAsUser string
	}{{false, "NoNewPrivs:\t0", "0"}, {true, "NoNewPrivs:\t1", "1000"}} {
		t.Run(fmt.Sprintf("no_new_privs=%v", c.on), func(t *testing.T) {
			b := newTestBackend(t, func(cfg *Config) { cfg.NoNewPrivs = c.on })
			inst := startSandbox(t, b, testSpec(t, isolation.Resources{}))
			if out := sh(t, inst, "stat -c '%a %u' /usr/bin/suid-id"); out != "4755 0\n" {
				t.Fatalf("/usr/bin/suid-id is %q, want mode 4755 owned by root", out)
			}
			if r := run(t, inst, "user", "/usr/bin/id", "-u"); strings.TrimSpace(r.stdout) != "1000" {
				t.Fatalf("id as user: %q %s", r.stdout, r.stderr)
			}
			if out := run(t, inst, "user", "/bin/grep", "NoNewPrivs", "/proc/self/status").stdout; !strings.Contains(out, c.status) {
				t.Errorf("status of a user process: %q, want %q", out, c.status)
			}
			if r := run(t, inst, "user", "/usr/bin/suid-id", "-u"); strings.TrimSpace(r.stdout) != c.euidAsUser {
				t.Errorf("setuid-root id as user: euid %q %s, want %s", r.stdout, r.stderr, c.euidAsUser)
			}
		})
	}
}

func TestAdoptAndCleanup(t *testing.T) {
	b := newTestBackend(t, nil)
	spec := testSpec(t, isolation.Resources{})
	inst := startSandbox(t, b, spec)
	saved := inst.State()
	sh(t, inst, "echo before > /root/f")

	// A new server process: a new Backend adopts from the saved state.
	b2 := newTestBackend(t, nil)
	ctx := context.Background()
	if ids, err := b2.Leftovers(map[string]bool{}); err != nil || !containsStr(ids, spec.ID) {
		t.Errorf("Leftovers = %v, %v; want it to list %s", ids, err, spec.ID)
	}
	if ids, _ := b2.Leftovers(map[string]bool{spec.ID: true}); containsStr(ids, spec.ID) {
		t.Errorf("Leftovers lists the known %s", spec.ID)
	}
	// Another server on the same host (same run dir and cgroup parent, its
	// own data dir) must not claim this sandbox.
	other := newTestBackend(t, func(c *Config) { c.StateDir = filepath.Join(t.TempDir(), "sandboxes") })
	if ids, err := other.Leftovers(map[string]bool{}); err != nil || containsStr(ids, spec.ID) {
		t.Errorf("a backend with another StateDir: Leftovers = %v, %v; must not list %s", ids, err, spec.ID)
	}
	adopted, err := b2.Adopt(ctx, spec.ID, saved)
	if err != nil {
		t.Fatal(err)
	}
	if got := sh(t, adopted, "cat /root/f"); got != "before\n" {
		t.Errorf("adopted sandbox reads %q", got)
	}
	if _, err := adopted.Stats(ctx); err != nil {
		t.Error(err)
	}
	if err := adopted.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-adopted.Done():
	case <-time.After(5 * time.Second):
		t.Error("adopted Done not closed")
	}
	assertGone(t, b, spec.ID)

	// A sandbox whose init died while the server was away cannot be
	// adopted; Cleanup removes what is left.
	spec2 := testSpec(t, isolation.Resources{})
	inst2 := startSandbox(t, b, spec2)
	saved2 := inst2.State()
	if err := killPid(inst2.state.InitPid); err != nil {
		t.Fatal(err)
	}
	<-inst2.Done()
	if _, err := b2.Adopt(ctx, spec2.ID, saved2); !errors.Is(err, isolation.ErrGone) {
		t.Errorf("Adopt of a dead sandbox: %v, want ErrGone", err)
	}
	for range 2 {
		if err := b2.Cleanup(ctx, spec2.ID, saved2); err != nil {
			t.Fatal(err)
		}
	}
	assertGone(t, b, spec2.ID)
	// Cleanup of something never started is fine too.
	if err := b2.Cleanup(ctx, "never-started", nil); err != nil {
		t.Error(err)
	}
}

func TestStartRollsBack(t *testing.T) {
	b := newTestBackend(t, nil)
	spec := testSpec(t, isolation.Resources{})
	spec.RootFS = filepath.Join(scratch, "no-such-rootfs")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := b.Start(ctx, spec); err == nil {
		t.Fatal("Start with a missing rootfs succeeded")
	} else {
		t.Logf("Start: %v", err)
	}
	assertGone(t, b, spec.ID)
}

// BenchmarkStartStop measures a sandbox's Start (to envd healthy) and Stop.
func BenchmarkStartStop(b *testing.B) {
	be := newTestBackend(b, func(c *Config) { c.Log = slog.New(slog.DiscardHandler) })
	var start, stop time.Duration
	for i := 0; i < b.N; i++ {
		spec := testSpec(b, isolation.Resources{})
		t0 := time.Now()
		inst, err := be.Start(context.Background(), spec)
		if err != nil {
			b.Fatal(err)
		}
		if err := isolation.WaitEnvd(context.Background(), inst); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := inst.Stop(context.Background()); err != nil {
			b.Fatal(err)
		}
		start += t1.Sub(t0)
		stop += time.Since(t1)
	}
	b.ReportMetric(float64(start.Milliseconds())/float64(b.N), "ms/start")
	b.ReportMetric(float64(stop.Milliseconds())/float64(b.N), "ms/stop")
}
