package recovery

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/agent-sandbox/agent-sandbox/client"
	"github.com/agent-sandbox/agent-sandbox/internal/hostlock"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail/jailtest"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
	"github.com/agent-sandbox/agent-sandbox/internal/server"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

// The host paths serve's jail backend uses by default (jail.Config): they
// are host-wide, so the checks below look only at this test's sandboxes.
const (
	runDir       = "/run/agent-sandbox"
	usernsDir    = "/run/agent-sandbox/userns"
	cgroupParent = "agent-sandbox"
)

// addressPool is the test server's own, away from the default pool (where a
// stopped server's sandboxes may still run) and the other tests' pools.
var addressPool = netip.MustParsePrefix("10.244.0.0/24")

// keptFile is written in the first sandbox before the crash and read back
// after it.
const (
	keptFile    = "/home/user/before-crash.txt"
	keptContent = "written before the crash, run "
)

// reasonLost is what the restarted server records for a sandbox that died
// while it was down (internal/sandbox).
const reasonLost = "lost on server restart"

// box is a sandbox the test made, with what it must find again.
type box struct {
	id        string
	sleepPid  string    // pid (inside the sandbox) of a detached sleep 3600
	sleepTime string    // its start time, field 22 of /proc/<pid>/stat
	state     jailState // its backend state, from the store
}

// TestServerCrashRecovery kills a real server with SIGKILL while four
// sandboxes run, kills the init of two of them while it is down, restarts it
// on the same data dir and checks that the two survivors are adopted
// (running, answering, their processes and files intact) and that the two
// dead ones are reported gone with nothing left of them on the host; then,
// once the survivors are killed and the server stopped, that nothing at all
// is left.
func TestServerCrashRecovery(t *testing.T) {
	testenv.RequireRoot(t)
	bin := buildServer(t)
	dataDir := dataDirWithBase(t)
	srv := &serverProc{t: t, bin: bin, dataDir: dataDir, apiKey: "e2b_" + randomHex(t, 20)}
	var all []*box
	finished := false
	t.Cleanup(func() {
		if !finished {
			srv.teardown(all)
		}
	})

	srv.start()
	c := srv.client()
	ctx := t.Context()
	tag := randomHex(t, 6)
	for i := range 4 {
		sb, err := c.CreateSandbox(ctx, client.CreateOptions{
			Timeout: 15 * time.Minute, Metadata: map[string]string{"recoveryTest": tag},
		})
		if err != nil {
			t.Fatalf("creating sandbox %d: %v", i, err)
		}
		b := &box{id: sb.ID}
		all = append(all, b)
		b.sleepPid = strings.TrimSpace(run(t, sb, "setsid sleep 3600 </dev/null >/dev/null 2>&1 & echo $!"))
		b.sleepTime = procStartTime(t, sb, b.sleepPid)
		if i == 0 {
			if err := sb.WriteFile(ctx, keptFile, []byte(keptContent+tag), client.FileOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	keep, lost := all[:2], all[2:]
	if got := listed(t, c, tag); !slices.Equal(got, ids(all)) {
		t.Fatalf("before the crash the server lists %v, want %v", got, ids(all))
	}

	srv.kill9()
	for _, b := range all {
		b.state = recordedState(t, dataDir, b.id)
		if !addressPool.Contains(b.state.Gateway) {
			t.Errorf("sandbox %s: gateway %s, outside --address-pool %s", b.id, b.state.Gateway, addressPool)
		}
	}
	for _, b := range lost {
		killInit(t, b.state)
	}
	t.Logf("killed the server (SIGKILL) and, while it was down, the inits of %v", ids(lost))

	srv.start()
	t.Logf("the restarted server: %s", srv.logLine("reconciled sandboxes"))
	if got := listed(t, c, tag); !slices.Equal(got, ids(keep)) {
		t.Errorf("after the restart the server lists %v, want the survivors %v", got, ids(keep))
	}
	for _, b := range keep {
		sb, err := c.Connect(ctx, b.id, client.ConnectOptions{})
		if err != nil {
			t.Errorf("connecting to adopted sandbox %s: %v", b.id, err)
			continue
		}
		if out := run(t, sb, "echo alive"); out != "alive\n" {
			t.Errorf("sandbox %s: echo alive printed %q", b.id, out)
		}
		if got := procStartTime(t, sb, b.sleepPid); got != b.sleepTime {
			t.Errorf("sandbox %s: pid %s started at %s before the crash, at %s now: not the same sleep", b.id, b.sleepPid, b.sleepTime, got)
		}
		if got := recordedState(t, dataDir, b.id); got != b.state {
			t.Errorf("sandbox %s: backend state %+v after the restart, %+v before: not adopted", b.id, got, b.state)
		}
		if b == keep[0] {
			if got, err := sb.ReadFile(ctx, keptFile, client.FileOptions{}); err != nil || string(got) != keptContent+tag {
				t.Errorf("sandbox %s: %s written before the crash reads %q, %v; want %q", b.id, keptFile, got, err, keptContent+tag)
			}
		}
	}
	for _, b := range lost {
		if _, err := c.GetSandbox(ctx, b.id); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("GetSandbox(%s) of a sandbox that died while the server was down: %v, want not found", b.id, err)
		}
		assertGone(t, dataDir, b.id)
	}

	for _, b := range keep {
		if err := c.KillSandbox(ctx, b.id); err != nil {
			t.Errorf("killing %s: %v", b.id, err)
		}
	}
	srv.stop()
	finished = true
	for _, b := range all {
		assertGone(t, dataDir, b.id)
	}
	assertPoolEmpty(t)
	st, err := store.Open(ctx, server.DBPath(dataDir))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, b := range all {
		want := store.ReasonKilled
		if slices.Contains(lost, b) {
			want = reasonLost
		}
		if rec, err := st.GetSandbox(ctx, b.id); err != nil || rec.State != store.StateKilled || rec.Reason != want {
			t.Errorf("record of %s: state %q, reason %q, %v; want killed, %q", b.id, rec.State, rec.Reason, err, want)
		}
	}
}

// buildServer builds agent-sandbox, envd and codeinterp from this tree into
// a temporary directory (serve finds the other two beside itself).
func buildServer(t *testing.T) string {
	t.Helper()
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	dir := t.TempDir()
	// The flags of `make build`, so that its build cache serves this one.
	cmd := exec.Command("go", "build", "-trimpath", "-o", dir+"/", "./cmd/...")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the server: %v\n%s", err, out)
	}
	return filepath.Join(dir, "agent-sandbox")
}

// dataDirWithBase makes the server's data directory and seeds it with hard
// links to the base template the SDK suite built (as make bench-smoke does),
// so that serve does not debootstrap it again; without one, serve builds it
// (minutes). The directory sits beside the SDK suite's, on its filesystem.
func dataDirWithBase(t *testing.T) string {
	t.Helper()
	sdkDir := cmp.Or(os.Getenv("AGENT_SANDBOX_TEST_DATA_DIR"), "/var/lib/agent-sandbox-sdk-test")
	dir, err := os.MkdirTemp(filepath.Dir(sdkDir), "agent-sandbox-recovery-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ms := mountsMentioning(t, dir); len(ms) > 0 {
			t.Errorf("left mounted, so %s is not removed: %v", dir, ms)
			return
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Error(err)
		}
	})
	base := filepath.Join(sdkDir, "templates", template.BaseName, template.Base().Hash())
	if _, err := os.Stat(filepath.Join(base, "template.json")); err != nil {
		t.Logf("no prebuilt base template (%v): serve builds it, which takes minutes", err)
		return dir
	}
	dst := filepath.Join(dir, "templates", template.BaseName)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-al", base, dst+"/").CombinedOutput(); err != nil {
		t.Logf("linking the base template from %s failed (%v: %s): serve builds it, which takes minutes", base, err, out)
		os.RemoveAll(dst)
	}
	return dir
}

// serverProc is one agent-sandbox serve process at a time on the test's
// data dir, started and ended by PID.
type serverProc struct {
	t       *testing.T
	bin     string
	dataDir string
	apiKey  string
	listen  string
	starts  int

	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	log  string        // the current process's output file
}

// startTimeout covers a serve that must build the base template first.
const startTimeout = 20 * time.Minute

// start starts serve and waits for GET /health to answer 204. serve refuses
// to start while another holds the host lock (a root test or a server), so
// it waits for the lock and tries again.
func (s *serverProc) start() {
	t := s.t
	t.Helper()
	deadline := time.Now().Add(startTimeout)
	for {
		waitHostLock(t)
		s.spawn()
		err := s.waitHealthy(deadline)
		if err == nil {
			return
		}
		out, _ := os.ReadFile(s.log)
		if errors.Is(err, errExited) && strings.Contains(string(out), hostlock.ErrHeld.Error()) && time.Now().Before(deadline) {
			t.Logf("serve found the host lock taken; waiting for it: %s", lastLine(out))
			continue
		}
		if s.running() {
			s.kill9()
		}
		t.Fatalf("serve (pid %d): %v\n--- its output ---\n%s", s.cmd.Process.Pid, err, tail(out, 64<<10))
	}
}

var errExited = errors.New("serve exited")

// waitHostLock returns once nobody holds the host lock, which serve takes.
func waitHostLock(t *testing.T) {
	t.Helper()
	owner := "go test " + t.Name() + ", waiting to start serve"
	release, err := hostlock.Acquire(hostlock.Path, owner, false)
	if errors.Is(err, hostlock.ErrHeld) {
		t.Logf("waiting for the host lock: %v", err)
		release, err = hostlock.Acquire(hostlock.Path, owner, true)
	}
	if err != nil {
		t.Fatal(err)
	}
	release()
}

func (s *serverProc) spawn() {
	t := s.t
	t.Helper()
	if s.listen == "" {
		s.listen = freeAddr(t)
	}
	s.starts++
	s.log = filepath.Join(t.TempDir(), fmt.Sprintf("serve-%d.log", s.starts))
	out, err := os.Create(s.log)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	// The jail: what the test reads of each sandbox's state is the jail's,
	// and auto would pick gvisor or vm where the host has them.
	s.cmd = exec.Command(s.bin, "serve", "--backend", "jail", "--listen", s.listen, "--data-dir", s.dataDir, "--api-key", s.apiKey,
		"--address-pool", addressPool.String(), "--warm-pool", "none")
	s.cmd.Stdout, s.cmd.Stderr = out, out
	// Should the test binary die, the server goes too (and gives back the
	// host lock); its sandboxes stay, in the data dir, as on any stop.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting serve: %v", err)
	}
	s.done = make(chan struct{})
	go func() {
		_ = s.cmd.Wait()
		close(s.done)
	}()
	t.Logf("started serve, pid %d, on %s (output %s)", s.cmd.Process.Pid, s.listen, s.log)
}

func (s *serverProc) waitHealthy(deadline time.Time) error {
	hc := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-s.done:
			return fmt.Errorf("%w before it was healthy: %v", errExited, s.cmd.ProcessState)
		default:
		}
		if res, err := hc.Get("http://" + s.listen + "/health"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusNoContent {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not healthy after %v", startTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *serverProc) running() bool {
	if s.done == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// kill9 sends the server SIGKILL by its PID and waits for it to die.
func (s *serverProc) kill9() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		s.t.Fatalf("SIGKILL to serve (pid %d): %v", s.cmd.Process.Pid, err)
	}
	<-s.done
}

// stop ends the server as an operator does (SIGTERM) and checks it exits
// cleanly; past a grace period it is killed.
func (s *serverProc) stop() {
	t := s.t
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM to serve (pid %d): %v", s.cmd.Process.Pid, err)
	}
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		s.kill9()
		t.Fatalf("serve (pid %d) did not stop within 30 s of SIGTERM", s.cmd.Process.Pid)
	}
	if !s.cmd.ProcessState.Success() {
		out, _ := os.ReadFile(s.log)
		t.Errorf("serve (pid %d) ended with %v\n--- its output ---\n%s", s.cmd.Process.Pid, s.cmd.ProcessState, tail(out, 16<<10))
	}
}

// teardown runs when the test stopped half-way: a server (restarted if it
// is down, so that it adopts or cleans up what is left) kills every
// sandbox of the data dir, and stops.
func (s *serverProc) teardown(all []*box) {
	t := s.t
	if len(all) == 0 && !s.running() {
		return
	}
	if !s.running() {
		t.Logf("cleaning up: restarting serve so that it reconciles %v", ids(all))
		s.start()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.client()
	left, _, err := c.ListSandboxes(ctx, client.ListOptions{})
	if err != nil {
		t.Errorf("cleaning up: %v", err)
	}
	for _, sb := range left {
		if err := c.KillSandbox(ctx, sb.ID); err != nil {
			t.Errorf("cleaning up: killing %s: %v", sb.ID, err)
		}
	}
	s.stop()
}

// logLine returns the first line of the current server's output that
// contains text.
func (s *serverProc) logLine(text string) string {
	out, _ := os.ReadFile(s.log)
	for line := range strings.Lines(string(out)) {
		if strings.Contains(line, text) {
			return strings.TrimSpace(line)
		}
	}
	return "(no line with " + strconv.Quote(text) + ")"
}

func (s *serverProc) client() *client.Client {
	url := "http://" + s.listen
	c, err := client.New(client.Config{APIURL: url, SandboxURL: url, Domain: s.listen, APIKey: s.apiKey})
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

// run runs a shell command as root in sb and returns its output; it fails
// the test unless the command exits 0.
func run(t *testing.T, sb *client.Sandbox, cmd string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out, errOut strings.Builder
	code, err := sb.Run(ctx, cmd, client.RunOptions{User: "root", Stdout: &out, Stderr: &errOut})
	if err != nil || code != 0 {
		t.Fatalf("sandbox %s: %q: exit %d, %v: %s%s", sb.ID, cmd, code, err, out.String(), errOut.String())
	}
	return out.String()
}

// procStartTime returns field 22 of /proc/<pid>/stat inside sb: with the
// pid, it names one process.
func procStartTime(t *testing.T, sb *client.Sandbox, pid string) string {
	t.Helper()
	stat := run(t, sb, "cat /proc/"+pid+"/stat")
	f := strings.Fields(stat[strings.LastIndexByte(stat, ')')+1:])
	if len(f) < 20 {
		t.Fatalf("sandbox %s: /proc/%s/stat: %q", sb.ID, pid, stat)
	}
	return f[19]
}

// listed returns the IDs of the running sandboxes tagged tag, sorted.
func listed(t *testing.T, c *client.Client, tag string) []string {
	t.Helper()
	infos, _, err := c.ListSandboxes(t.Context(), client.ListOptions{Metadata: map[string]string{"recoveryTest": tag}})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, in := range infos {
		if in.State != client.StateRunning {
			t.Errorf("sandbox %s is %s, want running", in.ID, in.State)
		}
		out = append(out, in.ID)
	}
	slices.Sort(out)
	return out
}

func ids(bs []*box) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.id)
	}
	slices.Sort(out)
	return out
}

// jailState is the part of the jail's backend state (as the store keeps
// it) that the test uses: the sandbox's init process on the host, and the
// host end of its veth.
type jailState struct {
	InitPid   int        `json:"init_pid"`
	InitStart uint64     `json:"init_start"`
	Gateway   netip.Addr `json:"gateway"`
}

// recordedState reads the backend state the store records for id.
func recordedState(t *testing.T, dataDir, id string) jailState {
	t.Helper()
	st, err := store.Open(t.Context(), server.DBPath(dataDir))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rec, err := st.GetSandbox(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	var s jailState
	if err := json.Unmarshal(rec.BackendState, &s); err != nil || s.InitPid <= 0 {
		t.Fatalf("backend state of %s: %s (%v)", id, rec.BackendState, err)
	}
	return s
}

// killInit sends SIGKILL to a sandbox's init, after checking the pid is
// still that process, and waits until it is dead.
func killInit(t *testing.T, s jailState) {
	t.Helper()
	if state, start := hostProc(s.InitPid); start != s.InitStart || state == "Z" {
		t.Fatalf("init pid %d: start time %d (state %q), the store says %d: not the sandbox's init", s.InitPid, start, state, s.InitStart)
	}
	if err := syscall.Kill(s.InitPid, syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL to init %d: %v", s.InitPid, err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if state, start := hostProc(s.InitPid); start != s.InitStart || state == "Z" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("init %d still alive 10 s after SIGKILL", s.InitPid)
		}
	}
}

// hostProc returns the state and start time of a host process; zero when
// there is none.
func hostProc(pid int) (state string, start uint64) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 20 {
		return "", 0
	}
	start, _ = strconv.ParseUint(f[19], 10, 64)
	return f[0], start
}

// assertGone checks that nothing of sandbox id is left on the host: its
// network namespace, cgroups, veth, loop device, sandbox directory, uid
// range reservation and any mount naming it.
func assertGone(t *testing.T, dataDir, id string) {
	t.Helper()
	dir := filepath.Join(dataDir, "sandboxes", id)
	for _, p := range []string{filepath.Join(network.Dir(runDir), id), dir} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("sandbox %s: %s is left (%v)", id, p, err)
		}
	}
	for _, d := range jailtest.CgroupParentDirs(cgroupParent) {
		if _, err := os.Stat(filepath.Join(d, id)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("sandbox %s: cgroup %s is left (%v)", id, filepath.Join(d, id), err)
		}
	}
	if _, err := netlink.LinkByName(network.VethName(id)); !errors.As(err, new(netlink.LinkNotFoundError)) {
		t.Errorf("sandbox %s: veth %s is left (%v)", id, network.VethName(id), err)
	}
	loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, l := range loops {
		if b, err := os.ReadFile(l); err == nil && strings.HasPrefix(string(b), dir+"/") {
			t.Errorf("sandbox %s: loop device %s is left, backed by %s", id, filepath.Base(filepath.Dir(filepath.Dir(l))), strings.TrimSpace(string(b)))
		}
	}
	res, _ := os.ReadDir(usernsDir)
	for _, r := range res {
		if b, err := os.ReadFile(filepath.Join(usernsDir, r.Name())); err == nil && string(b) == id {
			t.Errorf("sandbox %s: uid range %s is still reserved", id, r.Name())
		}
	}
	if ms := mountsMentioning(t, id); len(ms) > 0 {
		t.Errorf("sandbox %s: mounts left: %v", id, ms)
	}
}

// assertPoolEmpty checks that no veth on the host holds an address of the
// test's pool.
func assertPoolEmpty(t *testing.T) {
	t.Helper()
	veths, err := network.HostVeths()
	if err != nil {
		t.Fatal(err)
	}
	for id, a := range veths {
		if addressPool.Contains(a.Gateway) {
			t.Errorf("veth of %s (%s) is left in the test's pool", id, a.Gateway)
		}
	}
}

// mountsMentioning returns the host mounts whose mount point or source
// contains s.
func mountsMentioning(t *testing.T, s string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ms []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.Contains(sc.Text(), s) {
			ms = append(ms, sc.Text())
		}
	}
	return ms
}

// freeAddr returns a loopback address nothing listens on now; it is kept
// across restarts, as a client's configuration would be.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
