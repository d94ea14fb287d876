package cgroup

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
	"golang.org/x/sys/unix"
)

// helperEnv switches the test binary into a helper process (see TestMain).
const helperEnv = "AGENT_SANDBOX_CGROUP_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "alloc":
		// Wait until the test has put us in the group, then touch 256 MiB.
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		b := make([]byte, 256<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		os.Exit(0)
	case "count":
		// Print an ever-increasing counter, one line every 2 ms.
		for i := 1; ; i++ {
			fmt.Println(i)
			time.Sleep(2 * time.Millisecond)
		}
	}
	os.Exit(2)
}

// hostLayout skips t unless it runs as root and returns the host's layout.
func hostLayout(t *testing.T) layout {
	t.Helper()
	testenv.RequireRoot(t)
	lay, err := detect(Root)
	if err != nil {
		t.Fatalf("detect: %v", err)
	}
	return lay
}

// testParent returns a per-test parent group name.
func testParent(t *testing.T) string {
	return fmt.Sprintf("agent-sandbox-test-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
}

// newGroup creates the group <testParent>/sb with limits l and, when t ends
// (failed or not), kills and deletes it, removes the parent and checks that
// nothing is left.
func newGroup(t *testing.T, lay layout, l Limits) *Cgroup {
	t.Helper()
	parent := testParent(t)
	cleanupParent(t, lay, parent)
	c, err := create(lay, parent+"/sb", l)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Kill(ctx); err != nil && !errors.Is(err, ErrNotExist) {
			t.Errorf("cleanup: %v", err)
		}
		if err := c.Delete(ctx); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return c
}

// cleanupParent removes the parent group when t ends and checks that nothing
// of it is left in any hierarchy.
func cleanupParent(t *testing.T, lay layout, parent string) {
	t.Cleanup(func() {
		dirs := []string{filepath.Join(lay.root, parent)}
		if lay.mode != V2 {
			dirs = nil
			for _, ctl := range v1Controllers {
				dirs = append(dirs, filepath.Join(lay.root, string(ctl.name), parent))
			}
		}
		for _, d := range dirs {
			if err := removeTree(context.Background(), d); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
		assertGone(t, parent)
	})
}

// assertGone fails t if name exists in any hierarchy under Root.
func assertGone(t *testing.T, name string) {
	t.Helper()
	left, err := filepath.Glob(filepath.Join(Root, "*", name))
	if err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(Root, name)) {
		left = append(left, filepath.Join(Root, name))
	}
	if len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// child is a process started for a test, reaped in the background.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr syncBuffer
	done   chan struct{} // closed once cmd.Wait returned
}

// start starts cmd (with a pipe for stdin), adds it to c unless c is nil,
// and makes sure it is killed and reaped when t ends.
func start(t *testing.T, c *Cgroup, cmd *exec.Cmd) *child {
	t.Helper()
	ch := &child{cmd: cmd, done: make(chan struct{})}
	var err error
	if ch.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &ch.stderr
	// Don't let grandchildren holding stderr open (sh's sleeps) keep Wait
	// waiting once the child itself is gone.
	cmd.WaitDelay = 100 * time.Millisecond
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %v: %v", cmd.Args, err)
	}
	go func() {
		_ = cmd.Wait()
		close(ch.done)
	}()
	t.Cleanup(func() {
		// Kill the whole group first: the child may be frozen, and a
		// frozen v1 task does not die of SIGKILL until it is thawed.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if c != nil {
			if err := c.Kill(ctx); err != nil && !errors.Is(err, ErrNotExist) {
				t.Errorf("cleanup: %v", err)
			}
		}
		_ = cmd.Process.Kill()
		select {
		case <-ch.done:
		case <-ctx.Done():
			t.Errorf("cleanup: %v (pid %d) did not exit", cmd.Args, cmd.Process.Pid)
		}
	})
	if c != nil {
		if err := c.Add(cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
	}
	return ch
}

// release lets a child blocked reading a line from stdin go on.
func (ch *child) release(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(ch.stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
}

// wait waits for the child to exit and returns how it ended.
func (ch *child) wait(t *testing.T, timeout time.Duration) syscall.WaitStatus {
	t.Helper()
	select {
	case <-ch.done:
	case <-time.After(timeout):
		t.Fatalf("%v still running after %v", ch.cmd.Args, timeout)
	}
	return ch.cmd.ProcessState.Sys().(syscall.WaitStatus)
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// eventually polls cond until it holds or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

func TestDetect(t *testing.T) {
	mode, err := Detect()
	if err != nil {
		t.Fatalf("Detect: %v", err)
	}
	if mode != V1 && mode != Hybrid && mode != V2 {
		t.Fatalf("Detect = %v", mode)
	}
	t.Logf("host cgroup layout: %v", mode)
}

func TestCreate(t *testing.T) {
	lay := hostLayout(t)
	const mib = 1 << 20
	tests := []struct {
		name      string
		limits    Limits
		v1, v2    map[string]string // file (relative to Root on v1, to the group on v2) → content
		wantLimit uint64
	}{
		{
			name:   "limits",
			limits: Limits{CPUs: 1.5, MemoryBytes: 64 * mib, Pids: 50},
			v1: map[string]string{
				"cpu/cpu.cfs_period_us":              "100000",
				"cpu/cpu.cfs_quota_us":               "150000",
				"memory/memory.limit_in_bytes":       "67108864",
				"memory/memory.memsw.limit_in_bytes": "67108864", // when swap is accounted
				"pids/pids.max":                      "50",
			},
			v2: map[string]string{
				"cpu.max":         "150000 100000",
				"memory.max":      "67108864",
				"memory.swap.max": "0", // when swap is accounted
				"pids.max":        "50",
			},
			wantLimit: 64 * mib,
		},
		{
			name:   "no limits",
			limits: Limits{},
			v1: map[string]string{
				"cpu/cpu.cfs_quota_us": "-1",
				"pids/pids.max":        "max",
			},
			v2: map[string]string{
				"cpu.max":    "max 100000",
				"memory.max": "max",
				"pids.max":   "max",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newGroup(t, lay, tt.limits)
			if c.Name() != testParent(t)+"/sb" || c.Mode() != lay.mode {
				t.Errorf("Name, Mode = %q, %v", c.Name(), c.Mode())
			}
			for _, d := range c.Dirs() {
				if !exists(filepath.Join(d, "cgroup.procs")) {
					t.Errorf("%s is not a cgroup", d)
				}
			}
			want := tt.v1
			if lay.mode == V2 {
				want = tt.v2
			}
			for file, content := range want {
				var path string
				if lay.mode == V2 {
					path = filepath.Join(lay.root, c.Name(), file)
				} else {
					ctl, rest, _ := strings.Cut(file, "/")
					path = filepath.Join(lay.root, ctl, c.Name(), rest)
				}
				if strings.Contains(file, "swap") || strings.Contains(file, "memsw") {
					if !exists(path) {
						t.Logf("%s: no swap accounting", file)
						continue
					}
				}
				if got := readTrim(t, path); got != content {
					t.Errorf("%s = %q, want %q", file, got, content)
				}
			}
			if lay.mode != V2 && exists(filepath.Join(lay.root, "cpuset")) {
				root := readTrim(t, filepath.Join(lay.root, "cpuset", "cpuset.cpus"))
				if got := readTrim(t, filepath.Join(lay.root, "cpuset", c.Name(), "cpuset.cpus")); got != root {
					t.Errorf("cpuset.cpus = %q, want the root's %q", got, root)
				}
			}
			s, err := c.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if s.MemoryLimit != tt.wantLimit || s.Pids != 0 || s.OOMKills != 0 {
				t.Errorf("Stats = %+v, want MemoryLimit %d and no pids or OOM kills", s, tt.wantLimit)
			}

			_, err = create(lay, c.Name(), Limits{})
			if !errors.Is(err, ErrExist) {
				t.Errorf("creating %s again: %v, want ErrExist", c.Name(), err)
			}
		})
	}
}

func TestCreateRollsBack(t *testing.T) {
	lay := hostLayout(t)
	t.Parallel()
	parent := testParent(t)
	cleanupParent(t, lay, parent)
	name := parent + "/sb"
	// Valid for Validate, but beyond the kernel's largest CFS quota: the cpu
	// step fails after every directory has been made.
	_, err := create(lay, name, Limits{CPUs: 1e9, MemoryBytes: 64 << 20})
	if err == nil || !strings.Contains(err.Error(), "setting cpu limit of "+name) {
		t.Fatalf("create = %v, want an error setting the cpu limit", err)
	}
	t.Log(err)
	assertGone(t, name)
}

func TestAddProcs(t *testing.T) {
	lay := hostLayout(t)
	t.Parallel()
	c := newGroup(t, lay, Limits{CPUs: 1, MemoryBytes: 256 << 20, Pids: 20})
	ch := start(t, c, exec.Command("sleep", "60"))
	pids, err := c.Procs()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pids, []int{ch.cmd.Process.Pid}) {
		t.Errorf("Procs = %v, want [%d]", pids, ch.cmd.Process.Pid)
	}
	s, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.Pids != 1 {
		t.Errorf("Stats().Pids = %d, want 1", s.Pids)
	}
	if err := c.Add(-1); err == nil {
		t.Error("Add(-1) succeeded")
	}
}

func TestMemoryLimitOOMKills(t *testing.T) {
	lay := hostLayout(t)
	t.Parallel()
	c := newGroup(t, lay, Limits{MemoryBytes: 32 << 20})
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"=alloc")
	ch := start(t, c, cmd)
	ch.release(t) // now it is in the group: allocate

	ws := ch.wait(t, 30*time.Second)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("allocating 256 MiB under a 32 MiB limit ended with %v, want SIGKILL", ws)
	}
	s, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.OOMKills < 1 {
		t.Errorf("Stats().OOMKills = %d, want ≥ 1", s.OOMKills)
	}
	if s.MemoryLimit != 32<<20 {
		t.Errorf("Stats().MemoryLimit = %d, want %d", s.MemoryLimit, 32<<20)
	}
}

func TestPidsLimit(t *testing.T) {
	lay := hostLayout(t)
	t.Parallel()
	c := newGroup(t, lay, Limits{Pids: 5})
	// Once released, try to start 20 sleeps; at most 4 fit beside sh.
	ch := start(t, c, exec.Command("sh", "-c",
		`read x; i=0; while [ $i -lt 20 ]; do sleep 30 & i=$((i+1)); done; wait`))
	ch.release(t)
	// dash gives up at the first failed fork, bash retries for a while;
	// either says so on stderr.
	eventually(t, 10*time.Second, "a fork failure on stderr", func() bool {
		return strings.Contains(strings.ToLower(ch.stderr.String()), "fork")
	})
	t.Logf("sh: %s", strings.TrimSpace(ch.stderr.String()))
	pids, err := c.Procs()
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if len(pids) > 5 || s.Pids > 5 {
		t.Errorf("%d processes, pids.current %d; want ≤ 5", len(pids), s.Pids)
	}
}

func TestFreezeThaw(t *testing.T) {
	lay := hostLayout(t)
	t.Parallel()
	c := newGroup(t, lay, Limits{})
	testFreezeThaw(t, c)
}

// testFreezeThaw checks that a frozen counter in c does not advance and a
// thawed one does.
func testFreezeThaw(t *testing.T, c *Cgroup) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"=count")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var counter atomic.Int64
	start(t, c, cmd)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			n, _ := strconv.ParseInt(sc.Text(), 10, 64)
			counter.Store(n)
		}
	}()
	eventually(t, 5*time.Second, "the counter to advance", func() bool { return counter.Load() > 5 })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	if f, err := c.Frozen(); err != nil || !f {
		t.Fatalf("Frozen() = %v, %v after Freeze", f, err)
	}
	if c.Mode() == V2 {
		if got := readTrim(t, filepath.Join(c.Dirs()[0], "cgroup.events")); !strings.Contains(got, "frozen 1") {
			t.Errorf("cgroup.events = %q, want frozen 1", got)
		}
	} else if got := readTrim(t, filepath.Join(c.v1dirs["freezer"], "freezer.state")); got != "FROZEN" {
		t.Errorf("freezer.state = %q, want FROZEN", got)
	}
	time.Sleep(20 * time.Millisecond) // let the reader drain what was printed before
	before := counter.Load()
	time.Sleep(200 * time.Millisecond)
	if after := counter.Load(); after != before {
		t.Errorf("frozen counter went from %d to %d", before, after)
	}
	if _, err := c.Stats(); err != nil {
		t.Errorf("Stats of a frozen group: %v", err)
	}

	if err := c.Thaw(ctx); err != nil {
		t.Fatal(err)
	}
	if f, err := c.Frozen(); err != nil || f {
		t.Fatalf("Frozen() = %v, %v after Thaw", f, err)
	}
	eventually(t, 5*time.Second, "the thawed counter to advance", func() bool { return counter.Load() > before+5 })
}

func TestKillDelete(t *testing.T) {
	lay := hostLayout(t)
	t.Parallel()
	c := newGroup(t, lay, Limits{Pids: 20})
	ch := start(t, c, exec.Command("sh", "-c", `read x; sleep 60 & sleep 60 & sleep 60 & wait`))
	ch.release(t)
	eventually(t, 5*time.Second, "sh and three sleeps", func() bool {
		pids, err := c.Procs()
		return err == nil && len(pids) == 4
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Delete(ctx); err == nil {
		t.Fatal("Delete of a group with processes succeeded")
	}
	// Frozen v1 tasks cannot die until thawed: Kill must see to that.
	if err := c.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if pids, err := c.Procs(); err != nil || len(pids) != 0 {
		t.Fatalf("Procs after Kill = %v, %v", pids, err)
	}
	if ws := ch.wait(t, 5*time.Second); ws.Signal() != syscall.SIGKILL {
		t.Errorf("sh ended with %v, want SIGKILL", ws)
	}
	if err := c.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	assertGone(t, c.Name())
	if err := c.Delete(ctx); err != nil {
		t.Errorf("Delete of a deleted group: %v", err)
	}
	if err := c.Kill(ctx); !errors.Is(err, ErrNotExist) {
		t.Errorf("Kill of a deleted group: %v, want ErrNotExist", err)
	}
}

// TestRemove removes a group with a process in it by name alone, as a
// cleanup after a restart does; a group that is not there is no error.
func TestRemove(t *testing.T) {
	lay := hostLayout(t)
	t.Parallel()
	c := newGroup(t, lay, Limits{Pids: 20})
	ch := start(t, c, exec.Command("sh", "-c", `read x; sleep 60 & wait`))
	ch.release(t)
	eventually(t, 5*time.Second, "sh and a sleep", func() bool {
		pids, err := c.Procs()
		return err == nil && len(pids) == 2
	})
	if err := Remove(context.Background(), c.Name()); err != nil {
		t.Fatal(err)
	}
	if ws := ch.wait(t, 5*time.Second); ws.Signal() != syscall.SIGKILL {
		t.Errorf("sh ended with %v, want SIGKILL", ws)
	}
	assertGone(t, c.Name())
	if err := Remove(context.Background(), c.Name()); err != nil {
		t.Errorf("Remove of a group that is gone: %v", err)
	}
}

func TestLoad(t *testing.T) {
	lay := hostLayout(t)
	t.Parallel()
	c := newGroup(t, lay, Limits{MemoryBytes: 48 << 20})
	ch := start(t, c, exec.Command("sleep", "60"))

	got, err := load(lay, c.Name())
	if err != nil {
		t.Fatal(err)
	}
	if got.Name() != c.Name() || got.Mode() != c.Mode() || !slices.Equal(got.Dirs(), c.Dirs()) {
		t.Errorf("loaded %q %v %v, want %q %v %v", got.Name(), got.Mode(), got.Dirs(), c.Name(), c.Mode(), c.Dirs())
	}
	if pids, err := got.Procs(); err != nil || !slices.Equal(pids, []int{ch.cmd.Process.Pid}) {
		t.Errorf("loaded Procs = %v, %v; want [%d]", pids, err, ch.cmd.Process.Pid)
	}
	if s, err := got.Stats(); err != nil || s.MemoryLimit != 48<<20 {
		t.Errorf("loaded Stats = %+v, %v; want MemoryLimit %d", s, err, 48<<20)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := got.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := got.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := load(lay, c.Name()); !errors.Is(err, ErrNotExist) {
		t.Errorf("Load of a deleted group: %v, want ErrNotExist", err)
	}
	if _, err := load(lay, testParent(t)+"/never-made"); !errors.Is(err, ErrNotExist) {
		t.Errorf("Load of a group never made: %v, want ErrNotExist", err)
	}
}

// TestV2OnHybrid runs the v2 code for real on a v1 host, using the
// controller-less cgroup2 hierarchy that the hybrid layout mounts at
// Root/unified: no limits or memory figures there, but creation, Load,
// CLONE_INTO_CGROUP, freeze/thaw (cgroup.freeze, cgroup.events), cgroup.kill
// and removal are all v2's own. On a V2 host every other test covers this.
func TestV2OnHybrid(t *testing.T) {
	host := hostLayout(t)
	if host.mode != Hybrid {
		// Not a CI requirement: on a v2 host the other tests run this
		// code, on v1 there is no cgroup2 to run it on.
		t.Skipf("host layout is %v: the other tests run on it; this one needs hybrid's spare cgroup2", host.mode)
	}
	t.Parallel()
	lay := layout{V2, filepath.Join(Root, "unified")}
	if avail := readTrim(t, filepath.Join(lay.root, "cgroup.controllers")); !strings.Contains(avail, "pids") {
		if _, err := create(lay, testParent(t)+"/limited", Limits{Pids: 5}); err == nil || !strings.Contains(err.Error(), "controller pids is not available") {
			t.Errorf("create with a pids limit and no pids controller: %v", err)
		}
	}
	c := newGroup(t, lay, Limits{})
	if _, err := os.Stat(filepath.Join(lay.root, c.Name(), "cgroup.freeze")); err != nil {
		t.Fatal(err)
	}

	// CLONE_INTO_CGROUP: the child starts in the group, no Add needed.
	f, err := c.OpenDir()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(f.Fd())}
	first := start(t, nil, cmd)
	f.Close()
	second := start(t, c, exec.Command("sleep", "60"))
	want := []int{first.cmd.Process.Pid, second.cmd.Process.Pid}
	slices.Sort(want)
	if pids, err := c.Procs(); err != nil || !slices.Equal(pids, want) {
		t.Fatalf("Procs = %v, %v; want %v", pids, err, want)
	}
	if _, err := c.Stats(); err != nil {
		t.Fatal(err)
	}
	loaded, err := load(lay, c.Name())
	if err != nil {
		t.Fatal(err)
	}
	if pids, err := loaded.Procs(); err != nil || !slices.Equal(pids, want) {
		t.Fatalf("loaded Procs = %v, %v; want %v", pids, err, want)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readTrim(t, filepath.Join(c.Dirs()[0], "cgroup.events")); !strings.Contains(got, "frozen 1") {
		t.Errorf("cgroup.events = %q, want frozen 1", got)
	}
	if err := c.Kill(ctx); err != nil { // cgroup.kill, frozen or not
		t.Fatal(err)
	}
	for _, ch := range []*child{first, second} {
		if ws := ch.wait(t, 5*time.Second); ws.Signal() != syscall.SIGKILL {
			t.Errorf("sleep ended with %v, want SIGKILL", ws)
		}
	}
	if err := c.Thaw(ctx); err != nil {
		t.Fatal(err)
	}
	testFreezeThaw(t, c)
	if err := c.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := load(lay, c.Name()); !errors.Is(err, ErrNotExist) {
		t.Errorf("Load of a deleted group: %v, want ErrNotExist", err)
	}
}

// TestCPUSet checks that a group's cpu set is what its tasks' affinity
// shows (what nproc counts).
func TestCPUSet(t *testing.T) {
	lay := hostLayout(t)
	t.Parallel()
	c := newGroup(t, lay, Limits{CPUSet: []int{0}})
	ch := start(t, c, exec.Command("sleep", "60"))
	status := readTrim(t, fmt.Sprintf("/proc/%d/status", ch.cmd.Process.Pid))
	if !strings.Contains(status, "Cpus_allowed_list:\t0\n") {
		t.Errorf("a task of a group pinned to CPU 0 has %q", grepLine(status, "Cpus_allowed_list"))
	}
}

func grepLine(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// TestLimitIO checks that LimitIO writes the throttle rules for a device
// (a loop device of the test's own) and leaves zero rates unlimited; a
// group whose hierarchy lacks the controller gets an error saying so.
// TestDiskIOQuota in the jail measures the rates a sandbox gets.
func TestLimitIO(t *testing.T) {
	lay := hostLayout(t)
	t.Parallel()
	major, minor := testLoop(t)
	c := newGroup(t, lay, Limits{})
	l := IOLimit{Major: major, Minor: minor, ReadBPS: 3 << 20, WriteBPS: 1 << 20, WriteIOPS: 200}
	if err := c.LimitIO(l); err != nil {
		t.Fatal(err)
	}
	dev := fmt.Sprintf("%d:%d", major, minor)
	if lay.mode == V2 {
		want := fmt.Sprintf("%s rbps=%d wbps=%d riops=max wiops=200", dev, 3<<20, 1<<20)
		if got := readTrim(t, filepath.Join(c.Dirs()[0], "io.max")); got != want {
			t.Errorf("io.max = %q, want %q", got, want)
		}
	} else {
		dir := filepath.Join(lay.root, "blkio", c.Name())
		for file, want := range map[string]string{
			"blkio.throttle.read_bps_device":   fmt.Sprintf("%s %d", dev, 3<<20),
			"blkio.throttle.write_bps_device":  fmt.Sprintf("%s %d", dev, 1<<20),
			"blkio.throttle.read_iops_device":  "",
			"blkio.throttle.write_iops_device": dev + " 200",
		} {
			if got := readTrim(t, filepath.Join(dir, file)); got != want {
				t.Errorf("%s = %q, want %q", file, got, want)
			}
		}
	}
	if lay.mode == Hybrid {
		t.Run("no io controller", func(t *testing.T) {
			// The hybrid layout's cgroup2 has no controllers: no io.
			g := newGroup(t, layout{V2, filepath.Join(Root, "unified")}, Limits{})
			if err := g.LimitIO(l); err == nil || !strings.Contains(err.Error(), "io controller is not enabled") {
				t.Errorf("LimitIO without the io controller: %v, want an error naming it", err)
			}
		})
	}
}

// testLoop attaches a loop device to a small file for t and returns its
// numbers; it is detached when t ends.
func testLoop(t *testing.T) (major, minor uint32) {
	t.Helper()
	img := filepath.Join(t.TempDir(), "disk")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "--detach", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup --detach %s: %v: %s", dev, err, out)
		}
	})
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		t.Fatal(err)
	}
	return unix.Major(st.Rdev), unix.Minor(st.Rdev)
}

func TestOpenDirNeedsV2(t *testing.T) {
	lay := hostLayout(t)
	if lay.mode == V2 {
		// Not a CI requirement: the case does not exist on a v2 host.
		t.Skip("host is v2: OpenDir works (TestV2OnHybrid covers it on hybrid hosts)")
	}
	t.Parallel()
	c := newGroup(t, lay, Limits{})
	if _, err := c.OpenDir(); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("OpenDir on %v: %v, want ErrUnsupported", lay.mode, err)
	}
}

// TestTreeProcs reads cgroup.procs of a group and of the groups below it,
// past the control files beside them.
func TestTreeProcs(t *testing.T) {
	dir := t.TempDir()
	for path, content := range map[string]string{
		"cgroup.procs":                  "12\n7\n",
		"memory.limit_in_bytes":         "9223372036854771712\n",
		"child/cgroup.procs":            "40\n",
		"child/grandchild/cgroup.procs": "",
		"other/cgroup.procs":            "3\n",
	} {
		p := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pids, err := treeProcs(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(pids)
	if want := []int{3, 7, 12, 40}; !slices.Equal(pids, want) {
		t.Errorf("treeProcs = %v, want %v", pids, want)
	}
	if _, err := treeProcs(filepath.Join(dir, "gone")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("treeProcs of a missing group = %v, want fs.ErrNotExist", err)
	}
}
