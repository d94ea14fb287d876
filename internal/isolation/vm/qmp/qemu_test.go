package qmp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation/vm/kernel"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

// The tests below run a real qemu-system-x86_64 under TCG (no KVM needed).

// qemu is one QEMU process a test started, with its QMP client.
type qemu struct {
	*Client
	dir    string
	stderr *lockedBuffer
	exited chan struct{} // closed once the process is reaped
	err    error         // its exit status, once exited is closed
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startQEMU runs qemu-system-x86_64 with args plus a QMP socket and
// connects to it; the process is killed when t ends.
func startQEMU(t *testing.T, args ...string) *qemu {
	t.Helper()
	bin, err := exec.LookPath("qemu-system-x86_64")
	testenv.Require(t, err == nil, "test needs qemu-system-x86_64 (scripts/install-deps.sh --test installs Debian's qemu-system-x86)")
	q := &qemu{dir: t.TempDir(), stderr: &lockedBuffer{}, exited: make(chan struct{})}
	sock := filepath.Join(q.dir, "qmp.sock")
	cmd := exec.Command(bin, append([]string{"-no-user-config", "-nodefaults", "-display", "none",
		"-qmp", "unix:" + sock + ",server=on,wait=off"}, args...)...)
	cmd.Stderr = q.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { q.err = cmd.Wait(); close(q.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-q.exited
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		q.Client, err = Dial(ctx, sock)
		if err == nil {
			break
		}
		select {
		case <-q.exited:
			t.Fatalf("qemu exited (%v) before its QMP socket answered: %s", q.err, q.stderr)
		case <-ctx.Done():
			t.Fatalf("qemu's QMP socket did not answer: %v; stderr: %s", err, q.stderr)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Cleanup(func() { q.Close() })
	return q
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// noMachine is QEMU without a machine: enough for QMP itself.
var noMachine = []string{"-M", "none"}

func TestQEMUExecute(t *testing.T) {
	q := startQEMU(t, noMachine...)
	ctx := ctxFor(t, 30*time.Second)

	var v struct {
		QEMU struct{ Major, Minor int } `json:"qemu"`
	}
	if err := q.Execute(ctx, "query-version", nil, &v); err != nil {
		t.Fatal(err)
	}
	if v.QEMU.Major < 7 {
		t.Errorf("query-version: %+v, want QEMU ≥ 7", v)
	}

	err := q.Execute(ctx, "no-such-command", nil, nil)
	var qe *Error
	if !errors.As(err, &qe) || qe.Class != "CommandNotFound" || qe.Command != "no-such-command" {
		t.Errorf("unknown command: %v, want a CommandNotFound *Error", err)
	}
	err = q.Execute(ctx, "query-status", map[string]any{"bogus": 1}, nil)
	if !errors.As(err, &qe) || qe.Class != "GenericError" || !strings.Contains(qe.Desc, "bogus") {
		t.Errorf("bad argument: %v, want a GenericError naming it", err)
	}
}

// TestQEMUConcurrent runs commands with replies of different shapes from
// many goroutines at once: each must get its own.
func TestQEMUConcurrent(t *testing.T) {
	q := startQEMU(t, noMachine...)
	ctx := ctxFor(t, 60*time.Second)
	cmds := []struct{ cmd, key string }{
		{"query-version", "qemu"},
		{"query-status", "status"},
		{"query-kvm", "present"},
		{"no-such-command", ""}, // an error
	}
	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for g := 0; g < 20; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				c := cmds[(g+i)%len(cmds)]
				var r map[string]any
				err := q.Execute(ctx, c.cmd, nil, &r)
				var qe *Error
				switch {
				case c.key == "" && !errors.As(err, &qe):
					errs <- fmt.Errorf("%s: %v, want an *Error", c.cmd, err)
				case c.key != "" && err != nil:
					errs <- err
				case c.key != "" && r[c.key] == nil:
					errs <- fmt.Errorf("%s got a reply without %q: %v", c.cmd, c.key, r)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestQEMUStopContEvents(t *testing.T) {
	q := startQEMU(t, noMachine...)
	ctx := ctxFor(t, 30*time.Second)
	sub := q.Subscribe()
	defer sub.Close()

	if err := q.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if s, err := q.Status(ctx); err != nil || s != (StatusInfo{Running: false, Status: "paused"}) {
		t.Errorf("after Stop: %+v, %v", s, err)
	}
	if err := q.Cont(ctx); err != nil {
		t.Fatal(err)
	}
	if s, err := q.Status(ctx); err != nil || s != (StatusInfo{Running: true, Status: "running"}) {
		t.Errorf("after Cont: %+v, %v", s, err)
	}
	for _, want := range []string{"STOP", "RESUME"} {
		e, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if e.Name != want || time.Since(e.Time) > time.Minute {
			t.Errorf("event %+v, want %s just now", e, want)
		}
	}
}

// TestQEMUGetfd passes a descriptor with SCM_RIGHTS: QEMU has it under
// its name only when it came with the command.
func TestQEMUGetfd(t *testing.T) {
	q := startQEMU(t, noMachine...)
	ctx := ctxFor(t, 30*time.Second)
	f, err := os.CreateTemp(t.TempDir(), "fd")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	var qe *Error
	err = q.Execute(ctx, "getfd", map[string]any{"fdname": "x"}, nil)
	if !errors.As(err, &qe) || !strings.Contains(qe.Desc, "SCM_RIGHTS") {
		t.Errorf("getfd without a descriptor: %v, want QEMU's complaint about SCM_RIGHTS", err)
	}
	if err := q.ExecuteWithFile(ctx, "getfd", map[string]any{"fdname": "x"}, f, nil); err != nil {
		t.Fatal(err)
	}
	if err := q.Execute(ctx, "closefd", map[string]any{"fdname": "x"}, nil); err != nil {
		t.Errorf("closefd of the descriptor passed: %v", err)
	}
	if err := q.Execute(ctx, "closefd", map[string]any{"fdname": "x"}, nil); !errors.As(err, &qe) {
		t.Errorf("closefd again: %v, want an *Error", err)
	}
}

func TestQEMUQuit(t *testing.T) {
	q := startQEMU(t, noMachine...)
	ctx := ctxFor(t, 30*time.Second)
	if err := q.Quit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-q.exited:
		if q.err != nil {
			t.Errorf("qemu after quit: %v; stderr: %s", q.err, q.stderr)
		}
	case <-ctx.Done():
		t.Fatal("qemu did not exit after quit")
	}
	if _, err := q.Status(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Status after Quit: %v, want ErrClosed", err)
	}
}

// microVM is the machine the vm backend runs, booting the guest kernel
// install-deps unpacked, with no initrd: the kernel runs for a while (and
// then panics for lack of a root file system, and stays so with panic=0);
// a machine that ran is what Save and MigrateIncoming need.
func microVM(t *testing.T, console, cmdline string) []string {
	t.Helper()
	k, err := kernel.Open(kernel.DefaultDir)
	testenv.Require(t, err == nil, fmt.Sprintf("test needs the guest kernel: %v", err))
	return []string{"-M", "microvm,pit=on,pic=on,rtc=on", "-accel", "tcg", "-m", "128", "-smp", "1",
		"-no-reboot", "-serial", "file:" + console, "-kernel", k.Vmlinuz,
		"-append", "console=ttyS0 panic=0 tsc=unstable lpj=5000000 " + cmdline}
}

// ramHas dumps the guest's 128 MiB of RAM (pmemsave) and says whether
// they contain s.
func ramHas(t *testing.T, ctx context.Context, q *qemu, s string) bool {
	t.Helper()
	path := filepath.Join(q.dir, "ram.bin")
	if err := q.Execute(ctx, "pmemsave", map[string]any{"val": 0, "size": 128 << 20, "filename": path}, nil); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(path)
	return bytes.Contains(b, []byte(s))
}

// TestQEMUSaveRestore saves a booting guest to a file and restores it in a
// second QEMU that never ran: the second one's RAM then holds what only
// the first guest's kernel wrote there (the command line it printed, with
// a marker the second QEMU was not given).
func TestQEMUSaveRestore(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	rnd := make([]byte, 8)
	rand.Read(rnd)
	marker := "agent_sandbox_marker=" + hex.EncodeToString(rnd)

	srcConsole := filepath.Join(t.TempDir(), "console.log")
	src := startQEMU(t, microVM(t, srcConsole, marker)...)
	for !strings.Contains(readFile(srcConsole), "Command line: ") {
		select {
		case <-ctx.Done():
			t.Fatalf("the guest printed no command line: %s", readFile(srcConsole))
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := src.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(t.TempDir(), "vm.state")
	f, err := os.OpenFile(snap, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := src.Save(ctx, f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	fi, _ := os.Stat(snap)
	t.Logf("Save: %d bytes in %v", fi.Size(), time.Since(start).Round(time.Millisecond))
	if s, err := src.Status(ctx); err != nil || s.Status != "postmigrate" {
		t.Errorf("source after Save: %+v, %v; want postmigrate", s, err)
	}

	dst := startQEMU(t, append(microVM(t, filepath.Join(t.TempDir(), "console.log"), ""), "-incoming", "defer")...)
	if s, err := dst.Status(ctx); err != nil || s.Status != "inmigrate" {
		t.Errorf("destination before MigrateIncoming: %+v, %v; want inmigrate", s, err)
	}
	if ramHas(t, ctx, dst, marker) {
		t.Fatal("the destination's RAM holds the marker before the restore: the test proves nothing")
	}
	f, err = os.Open(snap)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	start = time.Now()
	if err := dst.MigrateIncoming(ctx, f); err != nil {
		t.Fatalf("%v; stderr: %s", err, dst.stderr)
	}
	t.Logf("MigrateIncoming: %v", time.Since(start).Round(time.Millisecond))
	// Saved paused, restored paused: the caller decides when it runs.
	if s, err := dst.Status(ctx); err != nil || s.Status != "paused" {
		t.Errorf("destination after MigrateIncoming: %+v, %v; want paused", s, err)
	}
	if !ramHas(t, ctx, dst, marker) {
		t.Error("the destination's RAM lacks the marker the source's guest wrote: the restore did not bring its memory")
	}
	if err := dst.Cont(ctx); err != nil {
		t.Fatal(err)
	}
	if s, err := dst.Status(ctx); err != nil || !s.Running {
		t.Errorf("destination after Cont: %+v, %v; want running", s, err)
	}
	if err := src.Cont(ctx); err != nil {
		t.Errorf("source Cont after Save: %v", err)
	}
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// TestQEMUSaveFails: a file QEMU cannot write to fails the migration with
// QEMU's reason, and the VM goes on answering.
func TestQEMUSaveFails(t *testing.T) {
	q := startQEMU(t, noMachine...)
	ctx := ctxFor(t, 30*time.Second)
	path := filepath.Join(t.TempDir(), "vm.state")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path) // read-only
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = q.Save(ctx, f)
	if err == nil || !strings.Contains(err.Error(), "migration failed: ") {
		t.Fatalf("Save to a read-only file: %v, want the migration's failure", err)
	}
	t.Logf("Save to a read-only file: %v", err)
	if s, err := q.Status(ctx); err != nil || s.Status != "running" {
		t.Errorf("after the failed Save: %+v, %v; want running", s, err)
	}
}

// TestQEMUMigrateIncomingFails: QEMU 7.2 exits when the stream is not a
// snapshot; MigrateIncoming says so.
func TestQEMUMigrateIncomingFails(t *testing.T) {
	q := startQEMU(t, append(noMachine, "-incoming", "defer")...)
	ctx := ctxFor(t, 30*time.Second)
	path := filepath.Join(t.TempDir(), "junk")
	if err := os.WriteFile(path, bytes.Repeat([]byte("junk"), 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = q.MigrateIncoming(ctx, f)
	if !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "QEMU exited while loading the snapshot") {
		t.Fatalf("MigrateIncoming of junk: %v, want QEMU's exit", err)
	}
	<-q.exited
	if !strings.Contains(q.stderr.String(), "Not a migration stream") {
		t.Errorf("qemu exited (%v) with stderr %q, want its reason", q.err, q.stderr)
	}
}
