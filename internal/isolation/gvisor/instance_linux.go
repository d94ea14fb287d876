package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/cgroup"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/disk"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
	"github.com/agent-sandbox/agent-sandbox/internal/proc"
	"golang.org/x/sys/unix"
)

// Instance is one gVisor sandbox.
type Instance struct {
	b     *Backend
	id    string
	cg    *cgroup.Cgroup
	ns    *network.Namespace
	state state // set before the Instance is returned, then read-only

	// ops serializes what changes the sandbox's run state: Pause, Resume.
	ops sync.Mutex

	*isolation.Ending // ended when the sandbox process has exited

	mu        sync.Mutex // guards the fields below
	paused    bool
	lastCPU   time.Duration
	lastCPUAt time.Time
}

var (
	_ isolation.Instance    = (*Instance)(nil)
	_ isolation.GuestLogger = (*Instance)(nil)
)

func newInstance(b *Backend, id string, cg *cgroup.Cgroup, ns *network.Namespace, st state) *Instance {
	inst := &Instance{b: b, id: id, cg: cg, ns: ns, state: st, Ending: isolation.NewEnding(), lastCPUAt: time.Now()}
	if s, err := cg.Stats(); err == nil {
		inst.lastCPU = s.CPUTime
	}
	return inst
}

// watch waits for the sandbox process to exit, then records why.
func (inst *Instance) watch(p *proc.Process) {
	p.Wait()
	p.Close()
	reason := "the gVisor sandbox exited"
	if why := exitReason(filepath.Join(inst.b.dir(inst.id), logFile)); why != "" {
		reason = "sandbox init: " + why
	}
	var oom bool
	if s, err := inst.cg.Stats(); err == nil && s.OOMKills > 0 {
		// The host killed a process of the sandbox's kernel: all of it is gone.
		oom = true
		reason = "the sandbox hit its memory limit (gVisor's kernel killed): " + reason
	}
	inst.End(isolation.Exit{OOM: oom, Reason: reason})
}

// GuestLog implements isolation.GuestLogger: the launcher's log, into
// which gvinit copies envd's output.
func (inst *Instance) GuestLog() string { return filepath.Join(inst.b.dir(inst.id), logFile) }

// State implements isolation.Instance.
func (inst *Instance) State() json.RawMessage {
	b, _ := json.Marshal(inst.state)
	return b
}

// Link implements isolation.Instance.
func (inst *Instance) Link() network.Link {
	if !inst.state.Gateway.IsValid() {
		return network.Link{}
	}
	return network.Link{HostIf: network.VethName(inst.id), Gateway: inst.state.Gateway, Address: inst.state.Address}
}

// Dial implements isolation.Instance: it connects to 127.0.0.1:port from
// inside the sandbox's network namespace, whose loopback, with host
// networking, is the sandbox's.
func (inst *Instance) Dial(ctx context.Context, port int) (net.Conn, error) {
	inst.mu.Lock()
	paused := inst.paused
	inst.mu.Unlock()
	return isolation.DialIn(ctx, inst.ns, inst.id, paused, inst.Done(), "127.0.0.1", port)
}

// Pause implements isolation.Instance: runsc pause stops every task in
// gVisor's kernel.
func (inst *Instance) Pause(ctx context.Context) error {
	inst.ops.Lock()
	defer inst.ops.Unlock()
	inst.mu.Lock()
	inst.paused = true // refuse new connections from now on
	inst.mu.Unlock()
	if _, err := inst.b.runsc(ctx, inst.ns, inst.b.dir(inst.id), "pause", inst.id); err != nil {
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
	if _, err := inst.b.runsc(ctx, inst.ns, inst.b.dir(inst.id), "resume", inst.id); err != nil {
		return fmt.Errorf("resuming sandbox %s: %w", inst.id, err)
	}
	inst.mu.Lock()
	inst.paused = false
	inst.mu.Unlock()
	return nil
}

// Snapshot implements isolation.Instance: not with this runsc, which
// refuses to checkpoint a sandbox with host networking (see the package
// doc).
func (inst *Instance) Snapshot(context.Context, string, isolation.SnapshotKind) error {
	return fmt.Errorf("snapshotting sandbox %s: runsc checkpoints no sandbox with host networking: %w", inst.id, errors.ErrUnsupported)
}

// Stats implements isolation.Instance. Memory is the cgroup's: what the
// sandbox's processes use, held by gVisor's kernel, and the kernel's own;
// disk is what the overlay's upper, the sandbox's disk image, holds.
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
	// The gofer serves the sandbox's files from the overlay, its root,
	// which reports its upper file system: the sandbox's disk.
	if gofer := inst.gofer(); gofer > 0 {
		var fs unix.Statfs_t
		if err := unix.Statfs(fmt.Sprintf("/proc/%d/root/", gofer), &fs); err == nil && fs.Type != unix.PROC_SUPER_MAGIC {
			bs := uint64(fs.Bsize)
			out.DiskTotal = fs.Blocks * bs
			out.DiskUsed = (fs.Blocks - fs.Bfree) * bs
		}
	}
	return out, nil
}

// goferName is the name runsc gives its gofer process (its argv[0]).
const goferName = "runsc-gofer"

// gofer returns the pid of the sandbox's gofer, found in its cgroup, or 0.
func (inst *Instance) gofer() int {
	pids, err := inst.cg.Procs()
	if err != nil {
		return 0
	}
	for _, pid := range pids {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && bytes.HasPrefix(cmdline, []byte(goferName+"\x00")) {
			return pid
		}
	}
	return 0
}

// Stop implements isolation.Instance.
func (inst *Instance) Stop(ctx context.Context) error { return inst.StopOnce(ctx, inst.stop) }

func (inst *Instance) stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t0 := time.Now()
	b := inst.b
	var errs []error
	// The sandbox process, its stubs and the gofer are all in the group;
	// the mounts go with the gofer's mount namespace.
	if err := inst.cg.Kill(ctx); err != nil && !errors.Is(err, cgroup.ErrNotExist) {
		errs = append(errs, err)
	}
	select {
	case <-inst.Done():
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("waiting for the sandbox process to exit: %w", ctx.Err()))
	}
	tKilled := time.Now()
	errs = append(errs, inst.cg.Delete(ctx), removeRuntimeCgroups(inst.cg.Name()), b.net.Release(ctx, inst.id),
		disk.ReleaseLoops(ctx, filepath.Join(b.dir(inst.id), imageFile)), removeDir(b.dir(inst.id)))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stopping sandbox %s: %w", inst.id, err)
	}
	b.cfg.Log.Debug("sandbox stopped", "sandbox_id", inst.id, "total", time.Since(t0), "kill", tKilled.Sub(t0))
	return nil
}
