package recovery

import (
	"encoding/json"
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail/jailtest"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox/sandboxtest"
	"github.com/agent-sandbox/agent-sandbox/internal/server"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv/servertest"
)

// The host paths serve's backends use by default (jail.Config, vm.Config):
// they are host-wide, so the checks below look only at this test's
// sandboxes.
const (
	runDir    = "/run/agent-sandbox"
	usernsDir = "/run/agent-sandbox/userns"
)

// backend is what the tests do differently on each isolation backend:
// where its sandboxes live on the host and which host process each lives
// in. Everything else — networking, uid ranges, the API — is shared.
type backend struct {
	name string // serve --backend
	// require skips the test, saying why, on a host that cannot run the
	// backend (fails it under CI=true); nil: root is all it needs.
	require func(testing.TB)
	// dir is the backend's directory of sandboxes in the data dir: one
	// directory per sandbox (the jail's disk image and init log; the VM's
	// overlay, initrd and QEMU's sockets).
	dir string
	// cgroupParent is the parent of each sandbox's cgroup, <parent>/<id>:
	// the jail's processes', or the VM's QEMU's.
	cgroupParent string
	// pidKey and startKey name, in the backend's state as the store keeps
	// it, the host process whose death is the sandbox's (the jail's init,
	// the VM's QEMU) and its start time.
	pidKey, startKey string
}

var (
	jailBackend = backend{name: "jail", dir: "sandboxes", cgroupParent: "agent-sandbox", pidKey: "init_pid", startKey: "init_start"}
	vmBackend   = backend{name: "vm", dir: "vms", cgroupParent: "agent-sandbox-vm", pidKey: "pid", startKey: "start", require: sandboxtest.RequireVM}
)

func (be backend) cgroup(id string) string { return be.cgroupParent + "/" + id }

// hostState is what the tests read of a sandbox's backend state.
type hostState struct {
	Pid     int        // the process whose death is the sandbox's
	Start   uint64     // its start time, field 22 of /proc/<pid>/stat
	Gateway netip.Addr // the host end of the sandbox's link
}

// recordedState reads the backend state the store records for id.
func (be backend) recordedState(t *testing.T, dataDir, id string) hostState {
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
	var fields map[string]json.RawMessage
	var s hostState
	err = json.Unmarshal(rec.BackendState, &fields)
	if err == nil {
		err = errors.Join(json.Unmarshal(fields[be.pidKey], &s.Pid), json.Unmarshal(fields[be.startKey], &s.Start),
			json.Unmarshal(fields["gateway"], &s.Gateway))
	}
	if err != nil || s.Pid <= 0 || s.Start == 0 {
		t.Fatalf("%s backend state of %s: %s (%v)", be.name, id, rec.BackendState, err)
	}
	return s
}

// killProcess sends SIGKILL to the process whose death is a sandbox's,
// after checking the pid is still that process, and waits until it is
// dead.
func killProcess(t *testing.T, s hostState) {
	t.Helper()
	if state, start := hostProc(s.Pid); start != s.Start || state == "Z" {
		t.Fatalf("pid %d: start time %d (state %q), the store says %d: not the sandbox's process", s.Pid, start, state, s.Start)
	}
	if err := syscall.Kill(s.Pid, syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL to pid %d: %v", s.Pid, err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if !alive(s) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still alive 10 s after SIGKILL", s.Pid)
		}
	}
}

// alive reports whether the process s names runs (a zombie does not).
func alive(s hostState) bool {
	state, start := hostProc(s.Pid)
	return start == s.Start && state != "Z"
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

// procsIn returns the host processes in cgroup (a name relative to the
// hierarchies' root) or in a group below it, in any hierarchy.
func procsIn(t *testing.T, cgroup string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil {
			continue // gone meanwhile
		}
		for line := range strings.Lines(string(b)) {
			// hierarchy-ID:controllers:path
			f := strings.SplitN(strings.TrimSpace(line), ":", 3)
			if len(f) == 3 && (f[2] == "/"+cgroup || strings.HasPrefix(f[2], "/"+cgroup+"/")) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// assertGone checks that nothing of sandbox id is left on the host: its
// processes, network namespace, cgroups, veth, loop device, directory, uid
// range reservation and any mount naming it.
func (be backend) assertGone(t *testing.T, dataDir, id string) {
	t.Helper()
	dir := filepath.Join(dataDir, be.dir, id)
	if pids := procsIn(t, be.cgroup(id)); len(pids) > 0 {
		t.Errorf("sandbox %s: processes %v are left in its cgroup %s", id, pids, be.cgroup(id))
	}
	for _, p := range []string{filepath.Join(network.Dir(runDir), id), dir} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("sandbox %s: %s is left (%v)", id, p, err)
		}
	}
	for _, d := range jailtest.CgroupParentDirs(be.cgroupParent) {
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
	if ms := servertest.MountsMentioning(t, id); len(ms) > 0 {
		t.Errorf("sandbox %s: mounts left: %v", id, ms)
	}
}

// assertNothingLeft checks, once the server has stopped, that nothing of
// the sandboxes ids is left on the host, nor anything else in the
// backend's directory of sandboxes or in the test's address pool.
func (be backend) assertNothingLeft(t *testing.T, dataDir string, ids []string) {
	t.Helper()
	for _, id := range ids {
		be.assertGone(t, dataDir, id)
	}
	if names := be.onDisk(t, dataDir); len(names) > 0 {
		t.Errorf("left in %s: %v", filepath.Join(dataDir, be.dir), names)
	}
	assertPoolEmpty(t)
}

// end is how the store records a sandbox's end.
type end struct {
	state  store.State
	reason string
}

// assertRecorded checks the store's record of how each sandbox of want
// ended.
func assertRecorded(t *testing.T, dataDir string, want map[string]end) {
	t.Helper()
	st, err := store.Open(t.Context(), server.DBPath(dataDir))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for id, w := range want {
		rec, err := st.GetSandbox(t.Context(), id)
		if got := (end{rec.State, rec.Reason}); err != nil || got != w {
			t.Errorf("record of %s: %+v, %v; want %+v", id, got, err, w)
		}
	}
}

// onDisk returns the names in the backend's directory of sandboxes: the
// sandboxes it runs, and for the vm the VMs it boots to make memory
// snapshots from.
func (be backend) onDisk(t *testing.T, dataDir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dataDir, be.dir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
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
