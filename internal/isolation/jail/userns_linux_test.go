package jail

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/idmap"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

func TestDecideUserns(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mode    UsernsMode
		maxNS   string
		readErr error
		release string
		on      bool
		reason  string // substring; "" = none
		err     bool
	}{
		{"auto, supported", UsernsAuto, "63000\n", nil, "6.18.44-fc", true, "", false},
		{"on, supported", UsernsOn, "63000\n", nil, "5.19.0", true, "", false},
		{"off", UsernsOff, "63000\n", nil, "6.18.44", false, "", false},
		{"off on a host without", UsernsOff, "0\n", nil, "4.19.0", false, "", false},
		{"auto, sysctl 0", UsernsAuto, "0\n", nil, "6.1.0-18-amd64", false, "user.max_user_namespaces = 0", false},
		{"on, sysctl 0", UsernsOn, "0\n", nil, "6.1.0", false, "", true},
		{"auto, no CONFIG_USER_NS", UsernsAuto, "", os.ErrNotExist, "6.1.0", false, "no user namespaces", false},
		{"auto, old kernel", UsernsAuto, "1000\n", nil, "5.15.0-91-generic", false, "older than 5.19", false},
		{"on, old kernel", UsernsOn, "1000\n", nil, "5.10.0", false, "", true},
		{"auto, garbage sysctl", UsernsAuto, "lots\n", nil, "6.1.0", false, "cannot parse", false},
		{"auto, garbage release", UsernsAuto, "10\n", nil, "linux", false, "older than 5.19", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			on, reason, err := decideUserns(tc.mode, tc.maxNS, tc.readErr, tc.release)
			if on != tc.on || (err != nil) != tc.err || (tc.reason == "") != (reason == "") || !strings.Contains(reason, tc.reason) {
				t.Errorf("decideUserns = %v, %q, %v; want %v, %q, error %v", on, reason, err, tc.on, tc.reason, tc.err)
			}
		})
	}
}

// requireUserns skips the test, or fails it under CI, where b (in mode
// auto) decided against user namespaces: the tests below are about them,
// and a host that cannot have them says why.
func requireUserns(t *testing.T, b *Backend) {
	t.Helper()
	_, reason, _ := hostUsernsSupport(UsernsAuto)
	testenv.Require(t, b.userns, "this host gives sandboxes no user namespace: "+reason)
}

// hostIDs returns the real, effective, saved and filesystem uids and gids
// of a host process, from its /proc/<pid>/status.
func hostIDs(t *testing.T, pid int) (uids, gids []string) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Uid:"); ok {
			uids = strings.Fields(v)
		}
		if v, ok := strings.CutPrefix(line, "Gid:"); ok {
			gids = strings.Fields(v)
		}
	}
	return uids, gids
}

// wantHostIDs fails unless every uid and gid of pid is want.
func wantHostIDs(t *testing.T, what string, pid int, wantUID, wantGID uint32) {
	t.Helper()
	uids, gids := hostIDs(t, pid)
	u, g := strconv.FormatUint(uint64(wantUID), 10), strconv.FormatUint(uint64(wantGID), 10)
	if strings.Join(uids, " ") != strings.Join([]string{u, u, u, u}, " ") ||
		strings.Join(gids, " ") != strings.Join([]string{g, g, g, g}, " ") {
		t.Errorf("%s (host pid %d): uids %v gids %v, want all %s and %s", what, pid, uids, gids, u, g)
	}
}

// sandboxProcess finds the host pid of the sandbox's process whose command
// line is args, waiting for it to appear.
func sandboxProcess(t *testing.T, inst *Instance, args ...string) int {
	t.Helper()
	want := strings.Join(args, "\x00") + "\x00"
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		procs, err := inst.cg.Procs()
		if err != nil {
			t.Fatal(err)
		}
		for _, pid := range procs {
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); string(b) == want {
				return pid
			}
		}
	}
	t.Fatalf("no process %q in the sandbox", args)
	return 0
}

// upperOwner reads the owner of path in the upper layer of inst's disk
// image, with debugfs, after flushing the sandbox's file system.
func upperOwner(t *testing.T, inst *Instance, path string) string {
	t.Helper()
	root, err := os.Open(fmt.Sprintf("/proc/%d/root/", inst.state.InitPid))
	if err != nil {
		t.Fatal(err)
	}
	err = unix.Syncfs(int(root.Fd()))
	root.Close()
	if err != nil {
		t.Fatalf("syncfs: %v", err)
	}
	out, err := exec.Command("debugfs", "-R", "stat /upper"+path, filepath.Join(inst.dir, diskFile)).CombinedOutput()
	if err != nil {
		t.Fatalf("debugfs: %v: %s", err, out)
	}
	m := regexp.MustCompile(`User:\s+(\d+)\s+Group:\s+(\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("debugfs stat %s: no owner in %s", path, out)
	}
	return string(m[1]) + ":" + string(m[2])
}

func TestUserns(t *testing.T) {
	b := newTestBackend(t, nil) // the default mode, auto
	requireUserns(t, b)
	inst := startSandbox(t, b, testSpec(t, isolation.Resources{}))
	base := inst.state.UsernsBase
	if base < b.cfg.UsernsBase {
		t.Fatalf("userns base %d, want at least %d", base, b.cfg.UsernsBase)
	}
	t.Logf("sandbox root is host uid %d", base)

	t.Run("host ids", func(t *testing.T) {
		wantHostIDs(t, "init", inst.state.InitPid, base, base)
		sh(t, inst, "sleep 300 >/dev/null 2>&1 &")
		wantHostIDs(t, "a process run as root", sandboxProcess(t, inst, "sleep", "300"), base, base)
		if r := run(t, inst, "user", "/bin/sh", "-c", "sleep 301 >/dev/null 2>&1 &"); r.exit != 0 {
			t.Fatalf("starting sleep as user: %+v", r)
		}
		wantHostIDs(t, "a process run as user", sandboxProcess(t, inst, "sleep", "301"), base+1000, base+1000)
		// Nothing in the sandbox is host root, or outside the range.
		procs, err := inst.cg.Procs()
		if err != nil {
			t.Fatal(err)
		}
		for _, pid := range procs {
			uids, _ := hostIDs(t, pid)
			for _, u := range uids {
				if n, _ := strconv.ParseUint(u, 10, 32); n < uint64(base) || n >= uint64(base)+idmap.Size {
					t.Errorf("host pid %d has uid %s, outside %d+%d", pid, u, base, idmap.Size)
				}
			}
		}
	})
	t.Run("ids inside", func(t *testing.T) {
		if got := strings.TrimSpace(sh(t, inst, "id")); got != "uid=0(root) gid=0(root) groups=0(root)" {
			t.Errorf("id as root: %q", got)
		}
		if r := run(t, inst, "user", "/usr/bin/id"); strings.TrimSpace(r.stdout) != "uid=1000(user) gid=1000(user) groups=1000(user)" {
			t.Errorf("id as user: %q %s", r.stdout, r.stderr)
		}
		if got := strings.TrimSpace(sh(t, inst, "cat /proc/self/uid_map")); strings.Join(strings.Fields(got), " ") != fmt.Sprintf("0 %d %d", base, idmap.Size) {
			t.Errorf("uid_map: %q", got)
		}
	})
	t.Run("template ownership", func(t *testing.T) {
		got := sh(t, inst, "stat -c '%u:%g %a %n' / /etc/passwd /home/user /usr/bin/suid-id /dev /dev/null /dev/shm /tmp")
		want := "0:0 755 /\n0:0 644 /etc/passwd\n1000:1000 755 /home/user\n0:0 4755 /usr/bin/suid-id\n" +
			"0:0 755 /dev\n0:0 666 /dev/null\n0:0 1777 /dev/shm\n0:0 1777 /tmp\n"
		if got != want {
			t.Errorf("owners inside:\n%s\nwant:\n%s", got, want)
		}
		if r := run(t, inst, "user", "/usr/bin/suid-id", "-u"); strings.TrimSpace(r.stdout) != "0" {
			t.Errorf("setuid-root id as user: euid %q %s", r.stdout, r.stderr)
		}
		sh(t, inst, "chown user:user /etc/hosts && test \"$(stat -c %U /etc/hosts)\" = user")
	})
	t.Run("new files on the upper", func(t *testing.T) {
		sh(t, inst, "echo r > /made-by-root && echo changed >> /etc/passwd")
		if r := run(t, inst, "user", "/bin/sh", "-c", "echo u > /home/user/made-by-user"); r.exit != 0 {
			t.Fatalf("writing as user: %+v", r)
		}
		for _, c := range []struct {
			path string
			id   uint32
		}{{"/made-by-root", base}, {"/etc/passwd", base}, {"/home/user/made-by-user", base + 1000}} {
			want := fmt.Sprintf("%d:%d", c.id, c.id)
			if got := upperOwner(t, inst, c.path); got != want {
				t.Errorf("%s on the upper: owner %s, want %s", c.path, got, want)
			}
			var st unix.Stat_t
			if err := unix.Stat(fmt.Sprintf("/proc/%d/root%s", inst.state.InitPid, c.path), &st); err != nil {
				t.Fatal(err)
			}
			if st.Uid != c.id || st.Gid != c.id {
				t.Errorf("%s seen from the host: %d:%d, want %s", c.path, st.Uid, st.Gid, want)
			}
		}
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(testRootfs(t), "etc/passwd"), &st); err != nil || st.Uid != 0 {
			t.Errorf("the template's /etc/passwd: uid %d, %v; want 0, unchanged", st.Uid, err)
		}
	})
	t.Run("network namespace", func(t *testing.T) {
		// The network namespace is the host's user namespace's: root in
		// the sandbox has no capability over it.
		if got := strings.TrimSpace(sh(t, inst, "/usr/bin/probe raw")); got != "EPERM" {
			t.Errorf("raw socket as root: %s, want EPERM", got)
		}
		// Ports below 1024 are open to every sandbox user instead.
		if r := run(t, inst, "user", "/bin/sh", "-c", "/usr/bin/probe listen 0.0.0.0:80 low-port >/dev/null 2>&1 &"); r.exit != 0 {
			t.Fatal(r)
		}
		var err error
		for range 100 {
			var c io.ReadCloser
			if c, err = inst.Dial(context.Background(), 80); err == nil {
				got, _ := io.ReadAll(c)
				c.Close()
				if string(got) != "low-port" {
					t.Errorf("port 80 answered %q", got)
				}
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Errorf("user's listener on port 80: %v", err)
		}
	})
	t.Run("two sandboxes", func(t *testing.T) {
		other := startSandbox(t, b, testSpec(t, isolation.Resources{}))
		ob := other.state.UsernsBase
		if ob == 0 || (ob < base+idmap.Size && base < ob+idmap.Size) {
			t.Errorf("ranges overlap: %d and %d (size %d)", base, ob, idmap.Size)
		}
		wantHostIDs(t, "the other sandbox's init", other.state.InitPid, ob, ob)
		// A server with its own reservations still sees both ranges in use,
		// from the running processes' maps.
		stranger, err := idmap.NewAllocator(t.TempDir(), b.cfg.UsernsBase)
		if err != nil {
			t.Fatal(err)
		}
		if sb, err := stranger.Allocate("stranger"); err != nil || sb == base || sb == ob {
			t.Errorf("another reservation directory: Allocate = %d, %v; want neither %d nor %d", sb, err, base, ob)
		}
	})
	t.Run("reservation", func(t *testing.T) {
		held, err := os.ReadFile(filepath.Join(b.cfg.UsernsDir, strconv.FormatUint(uint64(base), 10)))
		if err != nil || string(held) != inst.id {
			t.Errorf("reservation of %d: %q, %v; want %s", base, held, err, inst.id)
		}
		if err := inst.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(b.cfg.UsernsDir, strconv.FormatUint(uint64(base), 10))); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("reservation of %d after Stop: %v", base, err)
		}
	})
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const noUsernsWarning = "sandboxes start without a user namespace"

func TestUsernsOff(t *testing.T) {
	var logs syncBuffer
	b := newTestBackend(t, func(c *Config) {
		c.Userns = UsernsOff
		c.Log = slog.New(slog.NewTextHandler(&logs, nil))
	})
	inst := startSandbox(t, b, testSpec(t, isolation.Resources{}))
	if inst.state.UsernsBase != 0 {
		t.Errorf("userns base %d with userns off", inst.state.UsernsBase)
	}
	wantHostIDs(t, "envd", sandboxProcess(t, inst, "/usr/bin/envd", "--addr", "127.0.0.1:49983"), 0, 0)
	if got := strings.TrimSpace(sh(t, inst, "id -u; stat -c %u:%g /home/user")); got != "0\n1000:1000" {
		t.Errorf("inside: %q", got)
	}
	if strings.Contains(logs.String(), noUsernsWarning) {
		t.Errorf("userns off by choice logged a warning: %s", logs.String())
	}
}

// TestUsernsFallback starts sandboxes from a template on ramfs, which
// takes no idmapped mounts: in mode auto they start without a user
// namespace and the reason is logged once; in mode on they fail.
func TestUsernsFallback(t *testing.T) {
	b := newTestBackend(t, nil)
	requireUserns(t, b)
	dir := filepath.Join(t.TempDir(), "ramfs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("ramfs", dir, "ramfs", 0, "mode=755"); err != nil {
		t.Fatalf("mounting ramfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	if _, err := buildRootfs(dir); err != nil {
		t.Fatal(err)
	}

	var logs syncBuffer
	auto := newTestBackend(t, func(c *Config) { c.Log = slog.New(slog.NewTextHandler(&logs, nil)) })
	for range 2 {
		spec := testSpec(t, isolation.Resources{})
		spec.RootFS = dir
		inst := startSandbox(t, auto, spec)
		if inst.state.UsernsBase != 0 {
			t.Errorf("userns base %d from a ramfs template", inst.state.UsernsBase)
		}
		if got := strings.TrimSpace(sh(t, inst, "id -u; stat -c %u:%g /home/user")); got != "0\n1000:1000" {
			t.Errorf("inside: %q", got)
		}
		if _, err := os.Stat(filepath.Join(auto.cfg.UsernsDir, strconv.FormatUint(uint64(inst.state.UsernsBase), 10))); err == nil {
			t.Error("a range stays reserved for a sandbox without a user namespace")
		}
	}
	if n := strings.Count(logs.String(), noUsernsWarning); n != 1 || !strings.Contains(logs.String(), "idmapp") {
		t.Errorf("want one warning naming the idmapped mount, got %d:\n%s", n, logs.String())
	}
	t.Logf("warning: %s", logs.String())

	on := newTestBackend(t, func(c *Config) { c.Userns = UsernsOn })
	spec := testSpec(t, isolation.Resources{})
	spec.RootFS = dir
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if inst, err := on.Start(ctx, spec); err == nil {
		inst.Stop(ctx)
		t.Fatal("mode on started a sandbox from a ramfs template")
	} else if !strings.Contains(err.Error(), "idmapp") {
		t.Errorf("mode on: %v, want it to name the idmapped mount", err)
	}
	assertGone(t, on, spec.ID)
}
