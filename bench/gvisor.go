package bench

import (
	"context"
	"fmt"

	"github.com/agent-sandbox/agent-sandbox/client"
)

// Names of the gvisor figures; each is shown against the jail's figure of
// the same kind.
const (
	gvisorPrefix     = "gvisor: "
	figGvisorCold    = gvisorPrefix + "create→ready, no pool, serial"
	figGvisorPool    = gvisorPrefix + "create→ready, warm pool, serial"
	figGvisorRestore = gvisorPrefix + "create→ready from a checkpoint"
	figGvisorMemory  = gvisorPrefix + figIdleMemory
)

// logGvisorPlatform is the gvisor backend's line that names its platform
// (internal/isolation/gvisor).
const logGvisorPlatform = "gvisor: platform chosen"

// measureGvisor measures the gvisor backend on servers of its own on
// opts.GvisorDataDir: without a pool (serial creates, the command round
// trip, the micro-benchmarks, the memory of idle sandboxes), then with
// the warm pool.
func measureGvisor(ctx context.Context, opts *Options) ([]*Figure, error) {
	if err := seedTemplate(ctx, opts, opts.GvisorDataDir); err != nil {
		return nil, err
	}
	gvisor := func(log, pool string) serverSpec {
		return serverSpec{dataDir: opts.GvisorDataDir, log: "bench-server-" + log + ".log", pool: pool,
			args: []string{"--backend", "gvisor", "--debug"}}
	}
	figs, err := withServer(ctx, opts, gvisor("gvisor", "none"), func(s *server, c *client.Client) ([]*Figure, error) {
		return measureGvisorCold(ctx, opts, s, c)
	})
	if err != nil {
		return nil, err
	}
	pooled, err := withServer(ctx, opts, gvisor("gvisor-pool", opts.Pool), func(_ *server, c *client.Client) ([]*Figure, error) {
		opts.progress("gvisor: serial creates from the warm pool (%d, %v apart so the pool refills)", opts.Samples, opts.Gap)
		sr, err := warmSerial(ctx, c, opts.Template, opts.Samples, opts.Gap)
		if err != nil {
			return nil, err
		}
		f := latencyFigure(figGvisorPool, &sr.ready)
		f.Baseline = figPoolCreate
		return []*Figure{f}, nil
	})
	if err != nil {
		return nil, err
	}
	restore := skipped(figGvisorRestore, "no memory snapshots on the gvisor backend: Debian's runsc 20221219 refuses to checkpoint a sandbox with host networking (docs/SECURITY.md)")
	return append(append(figs, pooled...), restore), nil
}

// measureGvisorCold measures, on a gvisor server without a pool, serial
// creates, the command round trip, bash and the micro-benchmarks inside,
// and the host memory of idle sandboxes.
func measureGvisorCold(ctx context.Context, opts *Options, s *server, c *client.Client) ([]*Figure, error) {
	opts.progress("gvisor: serial creates without a pool (%d)", opts.Samples)
	sr, err := warmSerial(ctx, c, opts.Template, opts.Samples, 0)
	if err != nil {
		return nil, err
	}
	fc := latencyFigure(figGvisorCold, &sr.ready)
	fc.Baseline = figColdCreate
	fc.Note = sr.callNote()
	log, err := s.logSince(0)
	if err != nil {
		return nil, err
	}
	if chosen := log.with(logGvisorPlatform, nil); len(chosen) > 0 {
		fc.Note += fmt.Sprintf("; platform %s (%s)", chosen[0]["platform"], chosen[0]["runsc"])
	}

	opts.progress("gvisor: command round trip and micro-benchmarks")
	sb, _, err := createReady(ctx, c, opts.Template)
	if err != nil {
		return nil, err
	}
	defer sb.Kill(context.WithoutCancel(ctx))
	cmds, err := commandFigures(ctx, sb, opts.scale(100, 5), opts.scale(50, 5), gvisorPrefix)
	if err != nil {
		return nil, err
	}
	if err := sb.Kill(ctx); err != nil {
		return nil, err
	}

	most := min(opts.MaxIdle, opts.scale(50, 2))
	opts.progress("gvisor density: idle sandboxes until MemAvailable drops by %d MiB (at most %d)", opts.MemoryBudget>>20, most)
	count, per, err := density(ctx, opts, c, most, opts.MemoryBudget)
	if err != nil {
		return nil, fmt.Errorf("gvisor density: %w", err)
	}
	fm := &Figure{Name: figGvisorMemory, Unit: "MB", Value: per, N: count, Baseline: figIdleMemory,
		Note: fmt.Sprintf("host MemAvailable drop per sandbox over %d idle sandboxes (at most %d, or until %d MiB is used): the sentry, the gofer and what the sandbox touched",
			count, most, opts.MemoryBudget>>20)}
	return append(append([]*Figure{fc}, cmds...), fm), nil
}
