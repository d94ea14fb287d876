package vm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/cgroup"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/vm/qmp"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/vm/vminit"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
	"golang.org/x/sys/unix"
)

// Instance is one VM sandbox.
type Instance struct {
	b   *Backend
	id  string
	cg  *cgroup.Cgroup
	ns  *network.Namespace
	qmp *qmp.Client
	// console is the tail of what the guest printed on its console (and,
	// for a VM this server started, of what QEMU printed), read from
	// consoleConn (console_linux.go).
	console     *tail
	consoleRead chan struct{} // closed once consoleConn is read to its end
	requests    sync.Mutex    // one request to the guest's init at a time
	// signal signals QEMU (through its pidfd when adopted).
	signal func(unix.Signal) error
	pid    int
	start  uint64
	state  state // set before the Instance is returned, then read-only

	// ops serializes what changes the VM's run state: Pause, Resume,
	// Snapshot.
	ops sync.Mutex

	*isolation.Ending // ended when QEMU has exited

	mu          sync.Mutex // guards the fields below
	consoleConn net.Conn   // set once, when connected
	paused      bool
	// memorySaved: the guest's memory was saved while it was paused, and
	// it has not run since (syncVolumes).
	memorySaved bool
	lastCPU     time.Duration
	lastCPUAt   time.Time
}

var _ isolation.Instance = (*Instance)(nil)

func newInstance(b *Backend, id string, cg *cgroup.Cgroup, mon *qmp.Client, console *tail) *Instance {
	inst := &Instance{
		b: b, id: id, cg: cg, qmp: mon, console: console, consoleRead: make(chan struct{}),
		Ending: isolation.NewEnding(), lastCPUAt: time.Now(),
	}
	if s, err := cg.Stats(); err == nil {
		inst.lastCPU = s.CPUTime
	}
	return inst
}

// State implements isolation.Instance.
func (inst *Instance) State() json.RawMessage {
	b, _ := json.Marshal(inst.state)
	return b
}

// Link implements isolation.Instance.
func (inst *Instance) Link() network.Link {
	return network.Link{HostIf: network.VethName(inst.id), Gateway: inst.state.Gateway, Address: inst.state.Address}
}

// Dial implements isolation.Instance: it connects to the guest's address
// from inside the sandbox's network namespace (so from
// network.ForwarderAddr), which the guest redirects to its loopback.
func (inst *Instance) Dial(ctx context.Context, port int) (net.Conn, error) {
	inst.mu.Lock()
	paused := inst.paused
	inst.mu.Unlock()
	return isolation.DialIn(ctx, inst.ns, inst.id, paused, inst.Done(), inst.state.Address.String(), port)
}

// Pause implements isolation.Instance: the vCPUs stop (QMP stop); the
// guest's memory stays in the QEMU process.
func (inst *Instance) Pause(ctx context.Context) error {
	inst.ops.Lock()
	defer inst.ops.Unlock()
	inst.mu.Lock()
	inst.paused = true // refuse new connections from now on
	inst.mu.Unlock()
	if err := inst.qmp.Stop(ctx); err != nil {
		inst.mu.Lock()
		inst.paused = false
		inst.mu.Unlock()
		return fmt.Errorf("pausing sandbox %s: %w", inst.id, err)
	}
	return nil
}

// Resume implements isolation.Instance.
func (inst *Instance) Resume(ctx context.Context) error {
	inst.ops.Lock()
	defer inst.ops.Unlock()
	if err := inst.qmp.Cont(ctx); err != nil {
		return fmt.Errorf("resuming sandbox %s: %w", inst.id, err)
	}
	inst.mu.Lock()
	inst.paused, inst.memorySaved = false, false
	inst.mu.Unlock()
	return nil
}

// Stats implements isolation.Instance. Memory is the QEMU process's on
// the host (its cgroup): the guest's memory as far as the guest has
// touched it, and QEMU's own; disk is what the sandbox's overlay holds.
func (inst *Instance) Stats(ctx context.Context) (isolation.Stats, error) {
	s, err := inst.cg.Stats()
	if err != nil {
		return isolation.Stats{}, fmt.Errorf("sampling sandbox %s: %w", inst.id, err)
	}
	now := time.Now()
	cpus := inst.state.CPUCount
	out := isolation.Stats{
		Time:      now,
		CPUCount:  cpus,
		MemUsed:   s.MemoryUsage,
		MemTotal:  uint64(inst.state.MemoryMB) << 20,
		MemCache:  s.MemoryCache,
		OOMKills:  s.OOMKills,
		DiskTotal: uint64(inst.state.DiskMB) << 20,
	}
	inst.mu.Lock()
	if dt := now.Sub(inst.lastCPUAt); dt > 0 && s.CPUTime >= inst.lastCPU && cpus > 0 {
		out.CPUUsedPct = 100 * float64(s.CPUTime-inst.lastCPU) / float64(dt) / float64(cpus)
	}
	inst.lastCPU, inst.lastCPUAt = s.CPUTime, now
	inst.mu.Unlock()
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(inst.b.dir(inst.id), overlayFile), &st); err == nil {
		out.DiskUsed = uint64(st.Blocks) * 512
	}
	return out, nil
}

// Stop implements isolation.Instance.
func (inst *Instance) Stop(ctx context.Context) error {
	return inst.StopOnce(ctx, func(ctx context.Context) error {
		inst.syncVolumes(ctx)
		return inst.stop(ctx)
	})
}

// syncVolumes has the guest write its volumes' cached writes to their
// disks before QEMU is killed: a volume outlives the VM, and what the
// guest wrote last may be in its memory alone. A paused guest runs for
// that long. One whose memory was saved (paused to disk) is left as it
// was saved: it goes on from there, caches included, when restored,
// and must find its disks as it left them. A failure is logged; the VM
// is stopped all the same.
func (inst *Instance) syncVolumes(ctx context.Context) {
	inst.ops.Lock()
	defer inst.ops.Unlock()
	inst.mu.Lock()
	skip := inst.state.Volumes == 0 || inst.memorySaved || inst.consoleConn == nil
	paused := inst.paused
	inst.mu.Unlock()
	select {
	case <-inst.Done():
		return
	default:
	}
	if skip {
		return
	}
	err := func() error {
		if paused {
			if err := inst.qmp.Cont(ctx); err != nil {
				return err
			}
		}
		return inst.request(ctx, vminit.Request{Op: vminit.OpSync})
	}()
	if err != nil {
		inst.b.cfg.Log.Warn("writing back the volumes of a VM before stopping it; what it wrote last may be lost", "sandbox_id", inst.id, "err", err)
	}
}

func (inst *Instance) stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	b := inst.b
	errs := []error{inst.kill(ctx)}
	errs = append(errs, inst.cg.Delete(ctx), b.net.Release(ctx, inst.id), removeDir(b.dir(inst.id)), b.ids.Release(inst.id))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stopping sandbox %s: %w", inst.id, err)
	}
	return nil
}

// kill ends QEMU (the guest with it) and waits for it to be gone.
func (inst *Instance) kill(ctx context.Context) error {
	if inst.qmp != nil {
		inst.qmp.Close()
	}
	if inst.consoleConn != nil {
		inst.consoleConn.Close()
	}
	var errs []error
	if err := inst.signal(unix.SIGKILL); err != nil {
		errs = append(errs, err)
	}
	if err := inst.cg.Kill(ctx); err != nil && !errors.Is(err, cgroup.ErrNotExist) {
		errs = append(errs, err)
	}
	select {
	case <-inst.Done():
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("waiting for QEMU to exit: %w", ctx.Err()))
	}
	return errors.Join(errs...)
}

// finish records why the VM ended and closes done.
func (inst *Instance) finish(reason string) {
	// The guest's last words (a panic) may still be on their way.
	inst.mu.Lock()
	connected := inst.consoleConn != nil
	inst.mu.Unlock()
	if connected {
		select {
		case <-inst.consoleRead:
		case <-time.After(time.Second):
		}
	}
	if why := guestReason(inst.console.bytes()); why != "" {
		reason = why
	}
	var oom bool
	if s, err := inst.cg.Stats(); err == nil && s.OOMKills > 0 {
		oom = true
		reason = "the VM hit its host memory limit (QEMU killed): " + reason
	}
	inst.End(isolation.Exit{OOM: oom, Reason: reason})
}

var (
	panicLine = regexp.MustCompile(`Kernel panic - not syncing: ([^\r\n]*)`)
	haltLine  = regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(vminit.Halt) + `([^\r\n]*)`)
)

// guestReason is why the guest ended, from its console: a kernel panic,
// or vminit's halt line (it reboots when envd exits or setup fails); ""
// when the console says neither, as when QEMU was killed.
func guestReason(console []byte) string {
	if m := panicLine.FindSubmatch(console); m != nil {
		return "guest kernel panic: " + string(m[1])
	}
	if ms := haltLine.FindAllSubmatch(console, -1); ms != nil {
		return "guest init: " + string(ms[len(ms)-1][1])
	}
	return ""
}
