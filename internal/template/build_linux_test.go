package template

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/mountinfo"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

// The root tests build into a cache shared by test runs on this machine, so
// the small template (and the .debs debootstrap fetched) are made once and
// reused: AGENT_SANDBOX_TEST_CACHE, or /var/cache/agent-sandbox-test.
func testCache(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("AGENT_SANDBOX_TEST_CACHE")
	if dir == "" {
		dir = "/var/cache/agent-sandbox-test"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// safeTempDir is t.TempDir for directories that have mounts below them
// during the test: it is removed only after checking nothing is mounted
// there, where os.RemoveAll would happily empty a bind-mounted /dev.
func safeTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "template-test-")
	if err != nil {
		t.Fatal(err)
	}
	dir, _ = filepath.EvalSymlinks(dir)
	t.Cleanup(func() {
		if err := errors.Join(sweepMounts(dir), removeTree(dir)); err != nil {
			t.Errorf("removing %s: %v", dir, err)
		}
	})
	return dir
}

// testBuilder is a Builder whose steps run in the host runner.
func testBuilder(t *testing.T, dataDir string) *Builder {
	return hostSteps(t, &Builder{
		DataDir:  dataDir,
		Log:      slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})),
		Progress: t.Output(),
	})
}

func requireBuild(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	_, err := debootstrapPath()
	testenv.Require(t, err == nil, fmt.Sprint(err))
}

// smallSpec is minbase plus sudo and the default user: the smallest
// template with the E2B identity.
func smallSpec() Spec {
	return Spec{
		Name:     "test-small",
		Suite:    "bookworm",
		Variant:  "minbase",
		Packages: []string{"sudo"},
		Steps: append(DefaultUserSteps(),
			Step{Symlink: &SymlinkStep{Path: "/usr/local/bin/shell", Target: "/bin/bash"}}),
		User:    DefaultUser,
		Workdir: DefaultWorkdir,
		Env:     map[string]string{"LANG": "C.UTF-8"},
	}
}

var smallOnce sync.Mutex

// ensureSmall returns the small template, building it into the shared cache
// on first use on this machine.
func ensureSmall(t *testing.T) *Template {
	t.Helper()
	requireBuild(t)
	smallOnce.Lock()
	defer smallOnce.Unlock()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	tmpl, err := testBuilder(t, testCache(t)).Ensure(ctx, smallSpec())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("small template %s ready in %s (built in %s, %s)", tmpl.ID, time.Since(start).Round(time.Millisecond),
		tmpl.BuildDuration, humanBytes(tmpl.SizeBytes))
	return tmpl
}

func assertNoMounts(t *testing.T, dir string) {
	t.Helper()
	real, err := filepath.EvalSymlinks(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return
	} else if err != nil {
		t.Fatal(err)
	}
	ms, err := mountinfo.Under(real)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) > 0 {
		t.Errorf("left mounted under %s: %v", dir, ms)
	}
}

func assertNoBuildDirs(t *testing.T, dataDir, prefix string) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dataDir, "templates", ".build"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			t.Errorf("build directory left behind: %s", e.Name())
		}
	}
}

func assertHostDevIntact(t *testing.T) {
	t.Helper()
	fi, err := os.Stat("/dev/null")
	if err != nil || fi.Mode()&fs.ModeCharDevice == 0 {
		t.Fatalf("host /dev/null damaged: %v %v", fi, err)
	}
}

func TestBuildSmall(t *testing.T) {
	tmpl := ensureSmall(t)
	root := tmpl.RootFS
	assertNoMounts(t, filepath.Join(testCache(t), "templates"))

	for _, p := range []string{"usr/bin/bash", "usr/bin/sudo", "usr/sbin/useradd"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("rootfs lacks /%s: %v", p, err)
		}
	}
	passwd, _ := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if !strings.Contains(string(passwd), "\nuser:x:1000:1000::/home/user:/bin/bash\n") {
		t.Errorf("no user uid 1000 with bash in /etc/passwd:\n%s", passwd)
	}
	shadow, _ := os.ReadFile(filepath.Join(root, "etc/shadow"))
	if !strings.Contains(string(shadow), "\nuser::") {
		t.Errorf("user's password not deleted in /etc/shadow")
	}
	group, _ := os.ReadFile(filepath.Join(root, "etc/group"))
	if !strings.Contains(string(group), "sudo:x:27:user\n") {
		t.Errorf("user not in group sudo:\n%s", group)
	}
	checkFile(t, root, "etc/sudoers.d/user", 0o440, 0, "user ALL=(ALL:ALL) NOPASSWD: ALL\n")
	checkFile(t, root, ".e2b", 0o644, 0, fmt.Sprintf("ENV_ID=%s\nTEMPLATE_ID=%s\nBUILD_ID=%s\n", tmpl.ID, tmpl.ID, tmpl.Hash))
	checkFile(t, root, "etc/hostname", 0o644, 0, "e2b.local\n")
	checkFile(t, root, "etc/resolv.conf", 0o644, 0, "")
	checkFile(t, root, "etc/apt/sources.list", 0o644, 0, "deb http://deb.debian.org/debian bookworm main\n")
	checkDir(t, root, "home/user", 0o755, 1000)
	checkDir(t, root, "usr/local", 0o777, 0)
	checkDir(t, root, "code", 0o777, 0)
	if target, err := os.Readlink(filepath.Join(root, "usr/local/bin/shell")); err != nil || target != "/bin/bash" {
		t.Errorf("symlink step: %q, %v", target, err)
	}
	for _, gone := range []string{unsafeIOConf, policyRCD, "debootstrap"} {
		if _, err := os.Lstat(filepath.Join(root, gone)); err == nil {
			t.Errorf("build scaffolding /%s left in the rootfs", gone)
		}
	}
	for _, dir := range []string{"var/lib/apt/lists", "var/cache/apt/archives"} {
		entries, _ := os.ReadDir(filepath.Join(root, dir))
		for _, e := range entries {
			if e.Name() != "partial" && e.Name() != "lock" {
				t.Errorf("apt cache left: /%s/%s", dir, e.Name())
			}
		}
	}

	// Reuse: a second Ensure is a cache hit.
	start := time.Now()
	again, err := testBuilder(t, testCache(t)).Ensure(t.Context(), smallSpec())
	if err != nil {
		t.Fatal(err)
	}
	if again.RootFS != tmpl.RootFS || !again.BuiltAt.Equal(tmpl.BuiltAt) || time.Since(start) > time.Second {
		t.Errorf("second Ensure rebuilt or took %s", time.Since(start))
	}

	// The rootfs works as the sandbox's user would use it.
	merged := overlayRoot(t, root)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"/usr/bin/id", "-un"}, "user"},
		{[]string{"/bin/sh", "-c", "pwd"}, "/home/user"},
		{[]string{"/usr/bin/sudo", "-n", "/usr/bin/id", "-u"}, "0"},
	} {
		if got, err := runAsUser(merged, tc.args...); err != nil || strings.TrimSpace(got) != tc.want {
			t.Errorf("%v = %q, %v; want %q", tc.args, got, err, tc.want)
		}
	}
}

func checkFile(t *testing.T, root, name string, mode fs.FileMode, uid uint32, content string) {
	t.Helper()
	p := filepath.Join(root, name)
	fi, err := os.Lstat(p)
	if err != nil {
		t.Errorf("/%s: %v", name, err)
		return
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != mode || fi.Sys().(*syscall.Stat_t).Uid != uid {
		t.Errorf("/%s: mode %v uid %d, want a file with %v uid %d", name, fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid, mode, uid)
	}
	if data, _ := os.ReadFile(p); string(data) != content {
		t.Errorf("/%s = %q, want %q", name, data, content)
	}
}

func checkDir(t *testing.T, root, name string, mode fs.FileMode, uid uint32) {
	t.Helper()
	fi, err := os.Lstat(filepath.Join(root, name))
	if err != nil {
		t.Errorf("/%s: %v", name, err)
		return
	}
	if !fi.IsDir() || fi.Mode().Perm() != mode || fi.Sys().(*syscall.Stat_t).Uid != uid {
		t.Errorf("/%s: %v uid %d, want a directory %v uid %d", name, fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid, mode, uid)
	}
}

// overlayRoot mounts a throwaway overlay of lower with /proc and /dev in it,
// the way a sandbox sees a template, so checks never write to the cache.
func overlayRoot(t *testing.T, lower string) string {
	t.Helper()
	base := safeTempDir(t)
	upper, work, merged := filepath.Join(base, "upper"), filepath.Join(base, "work"), filepath.Join(base, "merged")
	for _, d := range []string{upper, work, merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	opts := "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		t.Fatalf("mounting overlay: %v", err)
	}
	var c cleanup
	c.push("unmounting overlay", func(context.Context) error { return unmount(merged) })
	t.Cleanup(func() {
		if err := c.run(context.Background()); err != nil {
			t.Error(err)
		}
	})
	if err := mountChroot(merged, &c); err != nil {
		t.Fatal(err)
	}
	return merged
}

// runAsUser runs a command as uid/gid 1000 chrooted into root, in
// /home/user, like `chroot --userspec=1000:1000`.
func runAsUser(root string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir = "/home/user"
	cmd.Env = []string{pathEnv, "HOME=/home/user", "USER=user", "LOGNAME=user", "TERM=xterm", "LANG=C.UTF-8"}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Chroot:     root,
		Credential: &syscall.Credential{Uid: 1000, Gid: 1000, Groups: []uint32{27}},
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%w: %s", err, stderr.String())
	}
	return string(out), nil
}

// copyBootstrap replaces debootstrap with a copy of an existing rootfs, so
// the later stages can be tested in seconds.
func copyBootstrap(src string, calls *atomic.Int32) func(context.Context, string, Spec) error {
	return func(ctx context.Context, rootfs string, _ Spec) error {
		if calls != nil {
			calls.Add(1)
		}
		out, err := exec.CommandContext(ctx, "cp", "-a", src+"/.", rootfs).CombinedOutput()
		if err != nil {
			return fmt.Errorf("copying rootfs: %v: %s", err, out)
		}
		return nil
	}
}

func TestBuildCancelDuringDebootstrap(t *testing.T) {
	ensureSmall(t) // fills the shared cache of .debs
	// A data dir of its own, where the debootstrapped system is not cached
	// yet, with hard links to the shared .debs (so that nothing is
	// downloaded again).
	data, err := os.MkdirTemp(testCache(t), "cancel-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := errors.Join(sweepMounts(data), removeTree(data)); err != nil {
			t.Errorf("removing %s: %v", data, err)
		}
	})
	if err := os.MkdirAll(filepath.Join(data, "templates", ".cache"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-al", filepath.Join(testCache(t), "templates", ".cache", "debs"), filepath.Join(data, "templates", ".cache")).CombinedOutput(); err != nil {
		t.Fatalf("linking the .deb cache: %v: %s", err, out)
	}
	b := testBuilder(t, data)
	spec := smallSpec()
	spec.Name = "test-cancel"
	buildRoot, _ := filepath.EvalSymlinks(filepath.Join(data, "templates", ".layers", ".tmp"))

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var mountedAtCancel []string
	b.OnProgress = func(stage string, ev Event) {
		// The first package being unpacked: debootstrap has /proc and /sys
		// of the target mounted and dpkg running in it.
		if stage == "bootstrap" && ev.Phase == "installing" && ev.Done > 0 && ctx.Err() == nil {
			if buildRoot == "" {
				buildRoot, _ = filepath.EvalSymlinks(filepath.Join(data, "templates", ".layers", ".tmp"))
			}
			mountedAtCancel, _ = mountinfo.Under(buildRoot)
			cancel()
		}
	}
	start := time.Now()
	_, err = b.Ensure(ctx, spec)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Ensure = %v, want context.Canceled", err)
	}
	t.Logf("cancelled build returned after %s: %v; mounted when cancelled: %v", time.Since(start).Round(time.Millisecond), err, mountedAtCancel)
	if len(mountedAtCancel) == 0 {
		t.Error("nothing was mounted when the build was cancelled: the test no longer exercises the cleanup")
	}
	assertNoMounts(t, filepath.Join(data, "templates"))
	assertNoBuildDirs(t, data, spec.Name+"-")
	if _, err := os.Stat(b.versionDir(spec.Name, spec.Hash())); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("version directory of a cancelled build exists: %v", err)
	}
	assertHostDevIntact(t)
}

func TestBuildCancelDuringPackages(t *testing.T) {
	small := ensureSmall(t)
	data := safeTempDir(t)
	b := testBuilder(t, data)
	b.bootstrap = copyBootstrap(small.RootFS, nil)
	spec := smallSpec()
	spec.Name = "test-packages-cancel"
	spec.Packages = []string{"less"}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var mountedAtCancel []string
	var cancelledIn Event
	b.OnProgress = func(stage string, ev Event) {
		// apt-get running in the step (an output line or its status).
		if stage == "packages" && (ev.Item != "" || ev.Phase == "downloading") && ctx.Err() == nil {
			mountedAtCancel, _ = mountinfo.Under(filepath.Join(data, "templates", ".layers"))
			cancelledIn = ev
			cancel()
		}
	}
	_, err := b.Ensure(ctx, spec)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Ensure = %v, want context.Canceled", err)
	}
	t.Logf("cancelled while %q %q; mounted: %v", cancelledIn.Phase, cancelledIn.Item, mountedAtCancel)
	if len(mountedAtCancel) == 0 {
		t.Error("nothing was mounted when the build was cancelled: the test no longer exercises the cleanup")
	}
	assertNoMounts(t, data)
	assertNoBuildDirs(t, data, spec.Name+"-")
	if entries, _ := os.ReadDir(filepath.Join(data, "templates", ".layers", ".tmp")); len(entries) != 0 {
		t.Errorf("unfinished layers left: %v", entries)
	}
	assertHostDevIntact(t)
}

func TestBuildStepsAndCache(t *testing.T) {
	small := ensureSmall(t)
	data := safeTempDir(t)
	outside := filepath.Join(safeTempDir(t), "host-file")
	if err := os.WriteFile(outside, []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	b := testBuilder(t, data)
	copyRoot := copyBootstrap(small.RootFS, &calls)
	b.bootstrap = func(ctx context.Context, rootfs string, s Spec) error {
		if err := copyRoot(ctx, rootfs, s); err != nil {
			return err
		}
		// A symlink in the rootfs pointing at a host path: the File step
		// must replace it, never write through it.
		return os.Symlink(outside, filepath.Join(rootfs, "etc/evil"))
	}
	spec := Spec{
		Name: "test-steps", Suite: "bookworm", Variant: "minbase",
		Steps: []Step{
			{File: &FileStep{Path: "/etc/evil", Content: "inside\n", Mode: 0o600}},
			{File: &FileStep{Path: "/opt/new/dir/file", Content: "x", Mode: 0o640, UID: 1000, GID: 1000}},
			{Dir: &DirStep{Path: "/data", Mode: 0o750, UID: 1000, GID: 1000}},
			{Symlink: &SymlinkStep{Path: "/usr/local/bin/py", Target: "/usr/bin/python3"}},
		},
		User: DefaultUser, Workdir: DefaultWorkdir,
	}

	// Concurrent Ensure calls build once.
	var wg sync.WaitGroup
	results := make([]*Template, 3)
	errs := make([]error, 3)
	for i := range results {
		wg.Go(func() { results[i], errs[i] = b.Ensure(t.Context(), spec) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Ensure %d: %v", i, err)
		}
		if results[i].RootFS != results[0].RootFS {
			t.Errorf("Ensure %d returned %s, want %s", i, results[i].RootFS, results[0].RootFS)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("bootstrapped %d times for one spec, want 1", n)
	}
	tmpl := results[0]
	assertNoMounts(t, data)
	assertNoBuildDirs(t, data, "")

	if data, _ := os.ReadFile(outside); string(data) != "host\n" {
		t.Errorf("file step wrote through a symlink to the host: %q", data)
	}
	checkFile(t, tmpl.RootFS, "etc/evil", 0o600, 0, "inside\n")
	checkFile(t, tmpl.RootFS, "opt/new/dir/file", 0o640, 1000, "x")
	checkDir(t, tmpl.RootFS, "data", 0o750, 1000)
	if target, _ := os.Readlink(filepath.Join(tmpl.RootFS, "usr/local/bin/py")); target != "/usr/bin/python3" {
		t.Errorf("symlink target = %q", target)
	}

	// List, Lookup, Remove.
	list, err := b.List()
	if err != nil || len(list) != 1 || list[0].ID != tmpl.ID || list[0].SizeBytes == 0 {
		t.Fatalf("List = %+v, %v; want just %s", list, err, tmpl.ID)
	}
	for _, ref := range []string{tmpl.ID, tmpl.Name} {
		if got, err := b.Lookup(ref); err != nil || got.RootFS != tmpl.RootFS {
			t.Errorf("Lookup(%q) = %v, %v", ref, got, err)
		}
	}
	if _, err := b.Lookup("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup(nope) = %v, want ErrNotFound", err)
	}
	removed, err := b.Remove(t.Context(), tmpl.ID)
	if err != nil || len(removed) != 1 {
		t.Fatalf("Remove = %v, %v", removed, err)
	}
	if _, err := os.Stat(filepath.Dir(tmpl.RootFS)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("template directory still there after Remove: %v", err)
	}
	if list, _ := b.List(); len(list) != 0 {
		t.Errorf("List after Remove = %+v", list)
	}
}

func TestBuildStepFailure(t *testing.T) {
	small := ensureSmall(t)
	data := safeTempDir(t)
	b := testBuilder(t, data)
	b.bootstrap = copyBootstrap(small.RootFS, nil)
	spec := Spec{
		Name: "test-fail", Suite: "bookworm", Variant: "minbase",
		Steps: []Step{
			{Dir: &DirStep{Path: "/ok", Mode: 0o755}},
			{Dir: &DirStep{Path: "/etc/passwd", Mode: 0o755}},
		},
		User: DefaultUser, Workdir: DefaultWorkdir,
	}
	_, err := b.Ensure(t.Context(), spec)
	if err == nil || !strings.Contains(err.Error(), "step 2 (make directory /etc/passwd)") {
		t.Fatalf("Ensure = %v, want an error naming step 2", err)
	}
	t.Logf("error: %v", err)
	assertNoMounts(t, data)
	assertNoBuildDirs(t, data, "")
	if list, _ := b.List(); len(list) != 0 {
		t.Errorf("a failed build is listed: %+v", list)
	}
}

func TestEnsureWithoutDebootstrap(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	saved := debootstrapDirs
	debootstrapDirs = nil
	t.Cleanup(func() { debootstrapDirs = saved })
	b := &Builder{DataDir: t.TempDir()}
	_, err := b.Ensure(t.Context(), smallSpec())
	if !errors.Is(err, ErrNoDebootstrap) || !strings.Contains(err.Error(), "apt-get install debootstrap") {
		t.Fatalf("Ensure = %v, want ErrNoDebootstrap telling how to install it", err)
	}
}
