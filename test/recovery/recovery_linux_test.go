package recovery

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/client"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv/servertest"
)

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
	state     hostState // from its backend state in the store
}

// TestServerCrashRecovery kills a real server with SIGKILL while four
// sandboxes run, kills two of them while it is down (the jail's init, the
// VM's QEMU), restarts it on the same data dir and checks that the two
// survivors are adopted (running, answering, their processes and files
// intact, sampled for metrics) and that the two dead ones are reported
// gone with nothing left of them on the host; then, once the survivors are
// killed and the server stopped, that nothing at all is left. It runs on
// each backend.
func TestServerCrashRecovery(t *testing.T) {
	for _, be := range []backend{jailBackend, vmBackend} {
		t.Run(be.name, func(t *testing.T) { crashRecovery(t, be) })
	}
}

func crashRecovery(t *testing.T, be backend) {
	testenv.RequireRoot(t)
	if be.require != nil {
		be.require(t)
	}
	srv := newServer(t, be.name)
	srv.Start()
	c := srv.Client()
	ctx := t.Context()
	tag := servertest.RandomHex(t, 6)
	var all []*box
	for i := range 4 {
		sb := srv.Create(client.CreateOptions{Timeout: 15 * time.Minute, Metadata: map[string]string{"recoveryTest": tag}})
		b := &box{id: sb.ID}
		all = append(all, b)
		b.sleepPid = strings.TrimSpace(run(t, sb, "setsid sleep 3600 </dev/null >/dev/null 2>&1 & echo $!"))
		b.sleepTime = procStartTime(t, sb, b.sleepPid)
		if i == 0 {
			if err := sb.WriteFile(ctx, keptFile, []byte(keptContent+tag), client.FileOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		// The control of the leftover check: a live sandbox's processes
		// are found in its cgroup.
		if len(procsIn(t, be.cgroup(b.id))) == 0 {
			t.Fatalf("sandbox %s runs, yet no host process is in its cgroup %s", b.id, be.cgroup(b.id))
		}
	}
	keep, lost := all[:2], all[2:]
	if got := listed(t, c, tag); !slices.Equal(got, ids(all)) {
		t.Fatalf("before the crash the server lists %v, want %v", got, ids(all))
	}

	srv.Kill9()
	for _, b := range all {
		b.state = be.recordedState(t, srv.DataDir, b.id)
		if !addressPool.Contains(b.state.Gateway) {
			t.Errorf("sandbox %s: gateway %s, outside --address-pool %s", b.id, b.state.Gateway, addressPool)
		}
	}
	// What the backend had on disk when the server died: its sandboxes and,
	// on the vm, a VM a memory snapshot was being made from, if any; the
	// restarted server owns them all.
	left := be.onDisk(t, srv.DataDir)
	for _, b := range lost {
		killProcess(t, b.state)
	}
	t.Logf("killed the server (SIGKILL) and, while it was down, the processes of %v (%s backend); on disk: %v", ids(lost), be.name, left)

	srv.Start()
	t.Logf("the restarted server: %s", srv.LogLine("reconciled sandboxes"))
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
		if got := be.recordedState(t, srv.DataDir, b.id); got != b.state || !alive(got) {
			t.Errorf("sandbox %s: backend state %+v after the restart (alive %v), %+v before: not adopted", b.id, got, alive(got), b.state)
		}
		if b == keep[0] {
			if got, err := sb.ReadFile(ctx, keptFile, client.FileOptions{}); err != nil || string(got) != keptContent+tag {
				t.Errorf("sandbox %s: %s written before the crash reads %q, %v; want %q", b.id, keptFile, got, err, keptContent+tag)
			}
			srv.checkMetrics(be, sb)
		}
	}
	for _, b := range lost {
		if reason, err := srv.ended(b.id, 0); err != nil || reason != reasonLost {
			t.Errorf("GET /sandboxes/%s of a sandbox that died while the server was down: ended %q, %v; want ended %q", b.id, reason, err, reasonLost)
		}
		be.assertGone(t, srv.DataDir, b.id)
	}

	for _, b := range keep {
		if err := c.KillSandbox(ctx, b.id); err != nil {
			t.Errorf("killing %s: %v", b.id, err)
		}
	}
	srv.Stop()
	be.assertNothingLeft(t, srv.DataDir, slices.Compact(slices.Sorted(slices.Values(append(ids(all), left...)))))
	want := map[string]end{}
	for _, b := range keep {
		want[b.id] = end{store.StateKilled, store.ReasonKilled}
	}
	for _, b := range lost {
		want[b.id] = end{store.StateKilled, reasonLost}
	}
	assertRecorded(t, srv.DataDir, want)
}

func ids(bs []*box) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.id)
	}
	slices.Sort(out)
	return out
}
