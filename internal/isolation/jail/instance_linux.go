package jail

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/cgroup"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/disk"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
)

// Instance is one jail sandbox.
type Instance struct {
	b     *Backend
	id    string
	cg    *cgroup.Cgroup
	ns    *network.Namespace
	dir   string
	cmd   *exec.Cmd // nil when adopted
	cpus  int
	state state // set before the Instance is returned, then read-only
	// export is where Stop exports the sandbox's changes (Spec.Export);
	// nil when there is none or the Instance was adopted.
	export *exportConfig

	*isolation.Ending // ended when init has exited

	mu        sync.Mutex // guards the fields below
	paused    bool
	lastCPU   time.Duration
	lastCPUAt time.Time
}

var (
	_ isolation.Instance    = (*Instance)(nil)
	_ isolation.GuestLogger = (*Instance)(nil)
	_ isolation.Halter      = (*Instance)(nil)
)

// GuestLog implements isolation.GuestLogger: init's log, into which it
// copies envd's output.
func (inst *Instance) GuestLog() string { return filepath.Join(inst.dir, logFile) }

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
// inside the sandbox's network namespace.
func (inst *Instance) Dial(ctx context.Context, port int) (net.Conn, error) {
	inst.mu.Lock()
	paused := inst.paused
	inst.mu.Unlock()
	return isolation.DialIn(ctx, inst.ns, inst.id, paused, inst.Done(), "127.0.0.1", port)
}

// Pause implements isolation.Instance.
func (inst *Instance) Pause(ctx context.Context) error {
	inst.mu.Lock()
	inst.paused = true // refuse new connections from now on
	inst.mu.Unlock()
	if err := inst.cg.Freeze(ctx); err != nil {
		inst.mu.Lock()
		inst.paused = false
		inst.mu.Unlock()
		return fmt.Errorf("pausing sandbox %s: %w", inst.id, err)
	}
	return nil
}

// Resume implements isolation.Instance.
func (inst *Instance) Resume(ctx context.Context) error {
	if err := inst.cg.Thaw(ctx); err != nil {
		return fmt.Errorf("resuming sandbox %s: %w", inst.id, err)
	}
	inst.mu.Lock()
	inst.paused = false
	inst.mu.Unlock()
	return nil
}

// Stats implements isolation.Instance. CPUUsedPct is the share of the
// sandbox's CPUs used since the previous sample (0–100).
func (inst *Instance) Stats(ctx context.Context) (isolation.Stats, error) {
	s, err := inst.cg.Stats()
	if err != nil {
		return isolation.Stats{}, fmt.Errorf("sampling sandbox %s: %w", inst.id, err)
	}
	now := time.Now()
	out := isolation.Stats{
		Time:        now,
		CPUCount:    inst.cpus,
		MemUsed:     s.MemoryUsage,
		MemTotal:    s.MemoryLimit,
		MemCache:    s.MemoryCache,
		OOMKills:    s.OOMKills,
		ProcessesUp: int(s.Pids),
	}
	inst.mu.Lock()
	if dt := now.Sub(inst.lastCPUAt); dt > 0 && s.CPUTime >= inst.lastCPU && inst.cpus > 0 {
		out.CPUUsedPct = 100 * float64(s.CPUTime-inst.lastCPU) / float64(dt) / float64(inst.cpus)
	}
	inst.lastCPU, inst.lastCPUAt = s.CPUTime, now
	inst.mu.Unlock()
	// The overlay reports its upper filesystem, the sandbox's disk image.
	var fs unix.Statfs_t
	if err := unix.Statfs(fmt.Sprintf("/proc/%d/root/", inst.state.InitPid), &fs); err == nil && fs.Type != unix.PROC_SUPER_MAGIC {
		bs := uint64(fs.Bsize)
		out.DiskTotal = fs.Blocks * bs
		out.DiskUsed = (fs.Blocks - fs.Bfree) * bs
	}
	return out, nil
}

// Stop implements isolation.Instance.
func (inst *Instance) Stop(ctx context.Context) error { return inst.StopOnce(ctx, inst.stop) }

// Halt implements isolation.Halter: SIGKILL to every process of the
// sandbox once, then init's exit. Init is the sandbox's PID namespace's
// first process, whose exit the kernel holds until every other process
// of the namespace has exited; the cgroup's emptying is left to Stop.
func (inst *Instance) Halt(ctx context.Context) error {
	inst.MarkStopping()
	ctx, cancel := context.WithTimeout(ctx, haltTimeout)
	defer cancel()
	var errs []error
	if err := inst.cg.Signal(); err != nil && !errors.Is(err, cgroup.ErrNotExist) {
		errs = append(errs, err)
	}
	errs = append(errs, inst.waitInit(ctx))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("halting sandbox %s: %w", inst.id, err)
	}
	return nil
}

// haltTimeout bounds the wait for a killed sandbox's init to exit.
const haltTimeout = 30 * time.Second

// waitInit waits for init to exit.
func (inst *Instance) waitInit(ctx context.Context) error {
	select {
	case <-inst.Done():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for init to exit: %w", ctx.Err())
	}
}

func (inst *Instance) stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, haltTimeout)
	defer cancel()
	t0 := time.Now()
	var errs []error
	if err := inst.cg.Kill(ctx); err != nil && !errors.Is(err, cgroup.ErrNotExist) {
		errs = append(errs, err)
	}
	errs = append(errs, inst.waitInit(ctx))
	tKilled := time.Now()
	if inst.export != nil {
		// Before the disk is discarded; the network goes meanwhile. Not
		// bounded by ctx's 30 s: a step may have written gigabytes.
		ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), exportTimeout)
		errs = append(errs, inst.exportChanges(ectx))
		cancel()
	}
	// Deleting the veth (and its shaper's ifb) waits out RCU grace periods
	// under the kernel's RTNL lock: most of a stop's time, spent waiting.
	// The disk's teardown does not depend on it, so the two run side by side.
	netDone := make(chan error, 1)
	go func() {
		t := time.Now()
		err := inst.b.net.Release(ctx, inst.id)
		inst.b.cfg.Log.Debug("sandbox network removed", "sandbox_id", inst.id, "took", time.Since(t))
		netDone <- err
	}()
	errs = append(errs, inst.cg.Delete(ctx), disk.ReleaseLoops(ctx, inst.dir+"/"+diskFile), removeDir(inst.dir))
	tDisk := time.Now()
	errs = append(errs, <-netDone, inst.b.ids.Release(inst.id))
	inst.b.cpus.release(inst.state.CPUSet)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stopping sandbox %s: %w", inst.id, err)
	}
	inst.b.cfg.Log.Debug("sandbox stopped", "sandbox_id", inst.id, "total", time.Since(t0),
		"kill", tKilled.Sub(t0), "cgroup_disk", tDisk.Sub(tKilled))
	return nil
}

// waitChild reaps init when this process started it.
func (inst *Instance) waitChild() {
	err := inst.cmd.Wait()
	reason := "init exited"
	if err != nil {
		reason = "init exited: " + err.Error()
	}
	inst.finish(reason)
}

// finish records why the sandbox ended and closes done.
func (inst *Instance) finish(reason string) {
	var oom bool
	if s, err := inst.cg.Stats(); err == nil && s.OOMKills > 0 {
		oom = true
		reason += fmt.Sprintf(" (%d processes killed by the memory limit)", s.OOMKills)
	}
	inst.End(isolation.Exit{OOM: oom, Reason: reason})
}
