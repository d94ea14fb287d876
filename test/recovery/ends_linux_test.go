package recovery

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/client"
	"github.com/agent-sandbox/agent-sandbox/internal/cgroup"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

// What the server records when a VM ends by itself (internal/sandbox
// prefixes "exited: " to the backend's reason; internal/isolation/vm reads
// a panic off the guest's console, and otherwise says how QEMU ended).
const (
	reasonPanic  = "exited: guest kernel panic: sysrq triggered crash"
	reasonOOM    = store.ReasonOOM
	reasonKilled = "exited: QEMU exited: signal: killed"
)

// TestVMEnds ends VMs of a real `serve --backend vm` in each way a sandbox
// ends without being killed, and checks that GET /sandboxes/{id} says why,
// that a neighbour keeps answering (and is sampled for metrics) and that
// nothing of them is left on the host:
//
//   - the guest's kernel panics (root in it writes c to /proc/sysrq-trigger);
//   - QEMU hits the memory limit of its host cgroup and is OOM-killed;
//   - QEMU dies of something else (SIGKILL from the test, as a crash);
//   - the sandbox's timeout passes.
func TestVMEnds(t *testing.T) {
	testenv.RequireRoot(t)
	be := vmBackend
	be.require(t)
	srv := newServer(t, be.name)
	srv.Start()
	ctx := t.Context()

	// First, so that its timeout passes while the others are made.
	// Its 20 s start after the control, which a busy host's slow boot would
	// otherwise eat into.
	expiring := srv.Create(client.CreateOptions{Timeout: 10 * time.Minute})
	run(t, expiring, "true") // the control: it ran before it expired
	if err := expiring.SetTimeout(ctx, 20*time.Second); err != nil {
		t.Fatalf("setting sandbox %s's timeout to 20 s: %v", expiring.ID, err)
	}
	neighbour := srv.Create(client.CreateOptions{Timeout: 10 * time.Minute})
	want := map[string]end{expiring.ID: {store.StateKilled, store.ReasonTimeout}, neighbour.ID: {store.StateKilled, store.ReasonKilled}}
	for _, c := range []struct {
		how    string
		end    func(*client.Sandbox)
		record end
	}{
		{"its guest kernel panicked", func(sb *client.Sandbox) {
			// The command never returns: its kernel goes with it.
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, _ = sb.Run(ctx, "echo c > /proc/sysrq-trigger", client.RunOptions{User: "root"})
		}, end{store.StateError, reasonPanic}},
		{"its QEMU hit its memory limit", func(sb *client.Sandbox) { oomQEMU(t, srv, be, sb) }, end{store.StateKilled, reasonOOM}},
		{"its QEMU was killed", func(sb *client.Sandbox) {
			killProcess(t, be.recordedState(t, srv.DataDir, sb.ID))
		}, end{store.StateError, reasonKilled}},
	} {
		sb := srv.Create(client.CreateOptions{Timeout: 10 * time.Minute})
		want[sb.ID] = c.record
		c.end(sb)
		if reason, err := srv.ended(sb.ID, 30*time.Second); err != nil || reason != c.record.reason {
			t.Errorf("sandbox %s, %s: ended %q, %v; want %q", sb.ID, c.how, reason, err, c.record.reason)
		}
		t.Logf("the server: %s", srv.LogLine("sandbox died", sb.ID))
		if out := run(t, neighbour, "echo alive"); out != "alive\n" {
			t.Errorf("neighbour %s after sandbox %s ended (%s): echo alive printed %q", neighbour.ID, sb.ID, c.how, out)
		}
	}
	srv.checkMetrics(be, neighbour)

	if reason, err := srv.ended(expiring.ID, time.Minute); err != nil || reason != store.ReasonTimeout {
		t.Errorf("sandbox %s, given a 20 s timeout: ended %q, %v; want %q", expiring.ID, reason, err, store.ReasonTimeout)
	}

	if err := srv.Client().KillSandbox(ctx, neighbour.ID); err != nil {
		t.Errorf("killing %s: %v", neighbour.ID, err)
	}
	srv.Stop()
	be.assertNothingLeft(t, srv.DataDir, srv.Made)
	assertRecorded(t, srv.DataDir, want)
}

// oomQEMU has the QEMU of sb's VM OOM-killed in its host cgroup. A guest
// alone cannot do it: the group's limit is the guest's memory plus QEMU's
// own allowance, and a guest that fills its memory meets its own kernel's
// OOM killer first (test/security's memory bomb checks exactly that). So
// the test does what a limit set too small would: it lowers the group's
// limit to the memory QEMU cannot give back now (all but the page cache)
// plus a little, then has the guest fill most of its free memory, which
// QEMU must back with pages the group has no room for.
func oomQEMU(t *testing.T, srv *serverProc, be backend, sb *client.Sandbox) {
	t.Helper()
	st := be.recordedState(t, srv.DataDir, sb.ID)
	name := be.cgroup(sb.ID)
	// The control: the limit lowered is QEMU's own.
	if pids := procsIn(t, name); !slices.Equal(pids, []int{st.Pid}) {
		t.Fatalf("sandbox %s: cgroup %s holds %v, want QEMU's pid %d alone", sb.ID, name, pids, st.Pid)
	}
	cg, err := cgroup.Load(name)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := cg.Stats()
	if err != nil {
		t.Fatalf("sandbox %s: cgroup %s: %v", sb.ID, name, err)
	}
	limit := cs.MemoryUsage - min(cs.MemoryCache, cs.MemoryUsage) + 32<<20
	file := filepath.Join(cgroup.Root, "memory", name, "memory.limit_in_bytes")
	if cg.Mode() == cgroup.V2 {
		file = filepath.Join(cgroup.Root, name, "memory.max")
	}
	if err := os.WriteFile(file, []byte(strconv.FormatUint(limit, 10)), 0); err != nil {
		t.Fatalf("sandbox %s: lowering QEMU's memory limit: %v", sb.ID, err)
	}
	t.Logf("sandbox %s: QEMU's memory limit lowered from %d MiB to %d MiB (its usage %d MiB, less %d MiB of page cache, + 32 MiB)",
		sb.ID, cs.MemoryLimit>>20, limit>>20, cs.MemoryUsage>>20, cs.MemoryCache>>20)
	// dd reads /dev/zero into one buffer of bs bytes, writing every page.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out, errOut strings.Builder
	code, err := sb.Run(ctx, "dd if=/dev/zero of=/dev/null count=1 bs=$(awk '/^MemAvailable:/ { print int($2 * 0.9) }' /proc/meminfo)K",
		client.RunOptions{User: "root", Stdout: &out, Stderr: &errOut})
	t.Logf("sandbox %s: dd of 90%% of the guest's available memory: exit %d, %v: %s%s", sb.ID, code, err, out.String(), strings.TrimSpace(errOut.String()))
}
