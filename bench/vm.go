package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/client"
)

// Names of the vm figures; each is shown against the jail's figure of the
// same kind.
const (
	vmPrefix      = "vm: "
	figVMSnapshot = vmPrefix + "create→ready from a memory snapshot, serial"
	figVMPool     = vmPrefix + "create→ready, warm pool, serial"
	figVMCold     = vmPrefix + "create→ready, cold boot, serial"
	figVMMemory   = vmPrefix + "host memory per idle VM"
)

// Messages of the vm servers' logs that the figures are checked against
// and broken down by (internal/isolation/vm, internal/sandbox).
const (
	logVMStarted    = "sandbox started"        // debug; restored=true when restored from a memory snapshot
	logVMRestored   = "sandbox restored"       // debug: load, identity, envd_token
	logCreateSteps  = "sandbox running: steps" // debug: before_init, init, service, record
	logSnapshotMade = "made a memory snapshot" // info
	logSnapshotFail = "making a memory snapshot failed"
)

// snapshotWait bounds the wait for the first memory snapshot: a cold boot
// under TCG on a busy host and the save (the server gives up on it after
// 3 minutes).
const snapshotWait = 5 * time.Minute

// measureVM measures the vm backend on servers of its own, one after
// another on opts.VMDataDir, each with --debug for the log lines the
// figures are checked against: without a pool, where every create
// restores the memory snapshot that the first one has made (create, the
// round trip, the memory of idle VMs); with the warm pool; and with
// --vm-cold-boot.
func measureVM(ctx context.Context, opts *Options) ([]*Figure, error) {
	if err := seedTemplate(ctx, opts, opts.VMDataDir); err != nil {
		return nil, err
	}
	// Each keeps its log, for a look at the steps after the run.
	vm := func(log, pool string, more ...string) serverSpec {
		return serverSpec{dataDir: opts.VMDataDir, log: "bench-server-" + log + ".log", pool: pool,
			args: append([]string{"--backend", "vm", "--debug"}, more...)}
	}
	var restore time.Duration // the create call's p50 from the snapshot
	figs, err := withServer(ctx, opts, vm("snapshot", "none"), func(s *server, c *client.Client) ([]*Figure, error) {
		figs, p50, err := measureVMSnapshot(ctx, opts, s, c)
		restore = p50
		return figs, err
	})
	if err != nil {
		return nil, err
	}
	// A pool member is a restore of the snapshot: twice the time of a
	// create from it lets the pool refill between samples.
	gap := max(opts.Gap, 2*restore)
	pooled, err := withServer(ctx, opts, vm("pool", opts.Pool), func(s *server, c *client.Client) ([]*Figure, error) {
		return measureVMPool(ctx, opts, s, c, gap)
	})
	if err != nil {
		return nil, err
	}
	cold, err := withServer(ctx, opts, vm("cold", "none", "--vm-cold-boot"), func(s *server, c *client.Client) ([]*Figure, error) {
		opts.progress("vm: serial cold boots (%d)", opts.VMSamples)
		f, _, err := vmSerial(ctx, opts, s, c, figVMCold, 0)
		if err != nil {
			return nil, err
		}
		f.Baseline = figColdCreate
		return []*Figure{f}, nil
	})
	if err != nil {
		return nil, err
	}
	return append(append(figs, pooled...), cold...), nil
}

// measureVMSnapshot waits for the memory snapshot, then measures serial
// creates from it, the command round trip and the host memory of idle
// VMs. It also returns the create call's p50.
func measureVMSnapshot(ctx context.Context, opts *Options, s *server, c *client.Client) ([]*Figure, time.Duration, error) {
	opts.progress("vm: a first create, which has the memory snapshot made (up to %v)", snapshotWait)
	if err := awaitSnapshot(ctx, opts, s, c); err != nil {
		return nil, 0, err
	}
	opts.progress("vm: serial creates from the snapshot (%d)", opts.VMSamples)
	off := s.logSize()
	fs, sr, err := vmSerial(ctx, opts, s, c, figVMSnapshot, 0)
	if err != nil {
		return nil, 0, err
	}
	fs.Baseline, fs.target = figColdCreate, p50AtMost(500)
	log, err := s.logSince(off)
	if err != nil {
		return nil, 0, err
	}
	started := log.with(logVMStarted, func(e logEntry) bool { return e["restored"] != "" })
	restored := log.with(logVMStarted, func(e logEntry) bool { return e["restored"] == "true" })
	fs.Note += fmt.Sprintf("; %d of %d VM starts restored the snapshot; restore p50: %s (%s)", len(restored), len(started),
		restored.p50s("total", "disk", "netns"), log.with(logVMRestored, nil).p50s("load", "identity", "envd_token"))

	opts.progress("vm: command round trip")
	sb, _, err := createReady(ctx, c, opts.Template)
	if err != nil {
		return nil, 0, err
	}
	defer sb.Kill(context.WithoutCancel(ctx))
	info, err := c.GetSandbox(ctx, sb.ID)
	if err != nil {
		return nil, 0, err
	}
	cmds, err := commandFigures(ctx, sb, opts.scale(100, 5), opts.scale(50, 5), vmPrefix)
	if err != nil {
		return nil, 0, err
	}
	cmds[0].Note = "timed inside the guest as in the jail, by the guest's clock (told the host TSC's rate, it keeps the host's time within a few per cent: see docs/PERFORMANCE.md)"
	if err := sb.Kill(ctx); err != nil {
		return nil, 0, err
	}

	opts.progress("vm density: idle VMs until MemAvailable drops by %d MiB (at most %d)", opts.MemoryBudget>>20, opts.VMMaxIdle)
	count, per, err := density(ctx, opts, c, opts.VMMaxIdle, opts.MemoryBudget)
	if err != nil {
		return nil, 0, fmt.Errorf("vm density: %w", err)
	}
	fm := &Figure{Name: figVMMemory, Unit: "MB", Value: per, N: count, Baseline: figIdleMemory, target: valueAtMost(100, "MB"),
		Note: fmt.Sprintf("host MemAvailable drop per VM over %d idle VMs of %d vCPUs and %d MiB restored from the snapshot (at most %d, or until %d MiB is used): the guest memory it touched and QEMU's own",
			count, info.CPUCount, info.MemoryMB, opts.VMMaxIdle, opts.MemoryBudget>>20)}
	return append(append([]*Figure{fs}, cmds...), fm), sr.call.Quantile(0.5), nil
}

// measureVMPool measures serial creates from the warm pool, gap apart.
func measureVMPool(ctx context.Context, opts *Options, s *server, c *client.Client, gap time.Duration) ([]*Figure, error) {
	opts.progress("vm: serial creates from the warm pool (%d, %v apart so the pool refills)", opts.VMSamples, gap)
	off := s.logSize()
	f, _, err := vmSerial(ctx, opts, s, c, figVMPool, gap)
	if err != nil {
		return nil, err
	}
	f.Baseline, f.target = figPoolCreate, p50AtMost(20)
	log, err := s.logSince(off)
	if err != nil {
		return nil, err
	}
	hits := len(log.with(logPoolCreate, nil))
	f.Note += fmt.Sprintf("; %d of %d creates (the warm-up among them) took a pool member", hits, hits+len(log.with(logColdCreate, nil)))
	return []*Figure{f}, nil
}

// vmSerial measures a warm-up and opts.VMSamples serial creates, gap
// apart, as the figure name; its note gives the create call alone and the
// server's steps, from its log.
func vmSerial(ctx context.Context, opts *Options, s *server, c *client.Client, name string, gap time.Duration) (*Figure, *serial, error) {
	off := s.logSize()
	sr, err := warmSerial(ctx, c, opts.Template, opts.VMSamples, gap)
	if err != nil {
		return nil, nil, err
	}
	log, err := s.logSince(off)
	if err != nil {
		return nil, nil, err
	}
	f := latencyFigure(name, &sr.ready)
	f.Note = sr.callNote() + "; the server's steps, p50: " + log.with(logCreateSteps, nil).p50s("before_init", "init", "record")
	return f, sr, nil
}

// awaitSnapshot creates (and kills) a sandbox, the first of its shape,
// which boots cold and has its memory snapshot made in the background, and
// waits until the server says it is made; unless that sandbox was restored
// from a snapshot an earlier run made.
func awaitSnapshot(ctx context.Context, opts *Options, s *server, c *client.Client) error {
	off := s.logSize()
	sb, _, err := createReady(ctx, c, opts.Template)
	if err != nil {
		return fmt.Errorf("first vm create: %w", err)
	}
	if err := sb.Kill(ctx); err != nil {
		return err
	}
	deadline := time.Now().Add(snapshotWait)
	for {
		log, err := s.logSince(off)
		if err != nil {
			return err
		}
		if len(log.with(logSnapshotMade, nil)) > 0 || len(log.with(logVMStarted, func(e logEntry) bool { return e["restored"] == "true" })) > 0 {
			return nil
		}
		if failed := log.with(logSnapshotFail, nil); len(failed) > 0 {
			return fmt.Errorf("the server could not make the memory snapshot: %s", failed[0]["err"])
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.exited:
			return fmt.Errorf("the server exited while making the memory snapshot: %v", s.err)
		case <-time.After(time.Second):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no memory snapshot made within %v; the server log %s ends: %s", snapshotWait, s.logPath, lastLine(s.logPath))
		}
	}
}

// seedTemplate hard-links the complete versions of the template (those
// with a template.json) from DataDir into dataDir, the data dir of
// another backend's servers, as make bench-smoke does, so that they
// build nothing (the vm servers make only its ext4 image).
func seedTemplate(ctx context.Context, opts *Options, dataDir string) error {
	metas, err := filepath.Glob(filepath.Join(opts.DataDir, "templates", opts.Template, "*", "template.json"))
	if err != nil {
		return err
	}
	to := filepath.Join(dataDir, "templates", opts.Template)
	for _, meta := range metas {
		version := filepath.Dir(meta)
		if _, err := os.Lstat(filepath.Join(to, filepath.Base(version))); err == nil {
			continue
		}
		if err := os.MkdirAll(to, 0o755); err != nil {
			return fmt.Errorf("seeding %s: %w", dataDir, err)
		}
		opts.progress("linking template %s into %s", version, to)
		if out, err := exec.CommandContext(ctx, "cp", "-al", version, to+"/").CombinedOutput(); err != nil {
			return fmt.Errorf("seeding %s: cp -al %s: %w: %s", dataDir, version, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}
