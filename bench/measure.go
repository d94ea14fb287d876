package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agent-sandbox/agent-sandbox/client"
)

// sandboxTimeout is the timeout of every sandbox the run creates: long
// enough for the slowest figure, short enough that a crashed run cleans
// up after itself.
const sandboxTimeout = 10 * time.Minute

// createTimes are the times of one create→ready.
type createTimes struct {
	call  time.Duration // the create call: the sandbox is up, envd initialised
	ready time.Duration // the call and the first commands.run('true')
}

// createReady creates a sandbox and runs `true` in it, as an SDK user
// does before anything else: the create→ready time.
func createReady(ctx context.Context, c *client.Client, tmpl string) (*client.Sandbox, createTimes, error) {
	t0 := time.Now()
	sb, err := c.CreateSandbox(ctx, client.CreateOptions{Template: tmpl, Timeout: sandboxTimeout})
	if err != nil {
		return nil, createTimes{}, err
	}
	call := time.Since(t0)
	code, err := sb.Run(ctx, "true", client.RunOptions{})
	d := time.Since(t0)
	if err == nil && code != 0 {
		err = fmt.Errorf("`true` exited %d", code)
	}
	if err != nil {
		_ = sb.Kill(context.WithoutCancel(ctx))
		return nil, createTimes{}, err
	}
	return sb, createTimes{call: call, ready: d}, nil
}

// serial is what serial creates measured.
type serial struct {
	call, ready, kill Latency // createTimes, and the kill that followed
}

// callNote says what the create call alone took; the rest of create→ready
// is the first command.
func (s *serial) callNote() string {
	return fmt.Sprintf("the create call alone: p50 %s ms, p99 %s ms", num(ms(s.call.Quantile(0.5))), num(ms(s.call.Quantile(0.99))))
}

// serialCreates creates, readies and kills n sandboxes one at a time,
// pausing gap after each kill.
func serialCreates(ctx context.Context, c *client.Client, tmpl string, n int, gap time.Duration) (*serial, error) {
	s := &serial{}
	for range n {
		sb, d, err := createReady(ctx, c, tmpl)
		if err != nil {
			return nil, err
		}
		s.call.add(d.call)
		s.ready.add(d.ready)
		t0 := time.Now()
		if err := sb.Kill(ctx); err != nil {
			return nil, err
		}
		s.kill.add(time.Since(t0))
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(gap):
		}
	}
	return s, nil
}

// warmSerial is serialCreates after one create that is not a sample: it
// pays for cold caches.
func warmSerial(ctx context.Context, c *client.Client, tmpl string, n int, gap time.Duration) (*serial, error) {
	if _, err := serialCreates(ctx, c, tmpl, 1, gap); err != nil {
		return nil, fmt.Errorf("warm-up create: %w", err)
	}
	s, err := serialCreates(ctx, c, tmpl, n, gap)
	if err != nil {
		return nil, fmt.Errorf("serial creates: %w", err)
	}
	return s, nil
}

// throughput runs total create→ready→kill cycles from conc workers and
// returns the completed creates per second of wall time and each
// create→ready latency.
func throughput(ctx context.Context, c *client.Client, tmpl string, conc, total int) (float64, *Latency, error) {
	jobs := make(chan struct{}, total)
	for range total {
		jobs <- struct{}{}
	}
	close(jobs)
	var mu sync.Mutex
	lat := &Latency{}
	var errs []error
	var wg sync.WaitGroup
	t0 := time.Now()
	for range conc {
		wg.Go(func() {
			for range jobs {
				sb, d, err := createReady(ctx, c, tmpl)
				if err == nil {
					err = sb.Kill(ctx)
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					lat.add(d.ready)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	wall := time.Since(t0)
	if err := errors.Join(errs...); err != nil {
		return 0, nil, fmt.Errorf("at concurrency %d: %w", conc, err)
	}
	return float64(total) / wall.Seconds(), lat, nil
}

// runTrue times n runs of `true` in sb (commands.run('true')).
func runTrue(ctx context.Context, sb *client.Sandbox, n int) (*Latency, error) {
	l := &Latency{}
	for range n {
		t0 := time.Now()
		code, err := sb.Run(ctx, "true", client.RunOptions{})
		if err != nil {
			return nil, err
		}
		if code != 0 {
			return nil, fmt.Errorf("`true` exited %d", code)
		}
		l.add(time.Since(t0))
	}
	return l, nil
}

// bashInside runs `bash -l -c true` n times inside sb, as commands.run
// does, and times each run from within the sandbox, without the API.
func bashInside(ctx context.Context, sb *client.Sandbox, n int) (*Latency, error) {
	return timings(ctx, sb, n, shellTimings(n, "bash -l -c true"))
}

// commandFigures measures in sb rounds commands.run('true') round trips
// and inside runs of bash (the share of the round trip that is the
// command itself), then the micro-benchmarks. prefix names the backend:
// "" for the jail's figures, the others' baselines.
func commandFigures(ctx context.Context, sb *client.Sandbox, rounds, inside int, prefix string) ([]*Figure, error) {
	rt, err := runTrue(ctx, sb, rounds)
	if err != nil {
		return nil, fmt.Errorf("commands.run('true'): %w", err)
	}
	in, err := bashInside(ctx, sb, inside)
	if err != nil {
		return nil, fmt.Errorf("timing bash inside the sandbox: %w", err)
	}
	fb := latencyFigure(prefix+figSandboxBash, in)
	fb.Note = "timed inside the sandbox around each run (bash's EPOCHREALTIME)"
	fr := latencyFigure(prefix+figRoundTrip, rt)
	if prefix == "" {
		fr.Baseline, fr.target = figSandboxBash, p50Times(1.15, figSandboxBash, "in-sandbox bash")
	} else {
		fb.Baseline, fr.Baseline = figSandboxBash, figRoundTrip
	}
	micro, err := microBenchmarks(ctx, sb, max(2, inside/20), prefix)
	if err != nil {
		return nil, err
	}
	return append([]*Figure{fb, fr}, micro...), nil
}

// The micro-benchmarks run inside sandboxes of each backend, to show what
// a backend costs code that computes and code that calls the kernel.
const (
	figCPUBound     = "in sandbox: CPU-bound (a Python loop of 2M additions)"
	figSyscallBound = "in sandbox: syscall-bound (dd, 20k one-byte reads and writes)"
)

// microBenchmarks times the CPU-bound loop (inside Python, without its
// start) and the syscall-bound dd (with its start) n times each inside
// sb. prefix names the backend ("" for the jail, whose figures are the
// others' baselines).
func microBenchmarks(ctx context.Context, sb *client.Sandbox, n int, prefix string) ([]*Figure, error) {
	cpu := fmt.Sprintf(`python3 -c '
import time
for _ in range(%d):
    t = time.perf_counter(); s = 0
    for i in range(2_000_000): s += i
    print(int((time.perf_counter() - t) * 1e6))'`, n)
	var figs []*Figure
	for _, m := range []struct{ name, script string }{
		{figCPUBound, cpu},
		{figSyscallBound, shellTimings(n, "dd if=/dev/zero of=/dev/null bs=1 count=20000 status=none")},
	} {
		l, err := timings(ctx, sb, n, m.script)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.name, err)
		}
		f := latencyFigure(prefix+m.name, l)
		if prefix != "" {
			f.Baseline = m.name
		}
		figs = append(figs, f)
	}
	return figs, nil
}

// shellTimings is a script that runs the shell command cmd n times and
// prints each run's time in µs, by bash's EPOCHREALTIME.
func shellTimings(n int, cmd string) string {
	return fmt.Sprintf("for i in $(seq %d); do s=$EPOCHREALTIME; %s; e=$EPOCHREALTIME; echo $(( ${e/./} - ${s/./} )); done", n, cmd)
}

// timings runs script in sb, which prints n times in µs, one per line:
// times taken inside the sandbox, without the API.
func timings(ctx context.Context, sb *client.Sandbox, n int, script string) (*Latency, error) {
	var out bytes.Buffer
	code, err := sb.Run(ctx, script, client.RunOptions{Stdout: &out})
	if err == nil && code != 0 {
		err = fmt.Errorf("exited %d", code)
	}
	if err != nil {
		return nil, err
	}
	l := &Latency{}
	for line := range strings.FieldsSeq(out.String()) {
		us, err := strconv.ParseInt(line, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("parsing %q: %w", line, err)
		}
		l.add(time.Duration(us) * time.Microsecond)
	}
	if len(l.Samples) != n {
		return nil, fmt.Errorf("got %d timings, want %d", len(l.Samples), n)
	}
	return l, nil
}

// transfer uploads and downloads size random bytes reps times through the
// router and returns the median MB/s each way. The download is checked
// against what was uploaded.
func transfer(ctx context.Context, sb *client.Sandbox, size, reps int) (up, down float64, err error) {
	data := make([]byte, size)
	rng := rand.NewChaCha8([32]byte{1})
	_, _ = rng.Read(data)
	path := fmt.Sprintf("/home/user/bench-%d.bin", size)
	var ul, dl Latency
	for range reps {
		t0 := time.Now()
		if err := sb.WriteFile(ctx, path, data, client.FileOptions{}); err != nil {
			return 0, 0, err
		}
		ul.add(time.Since(t0))
		t0 = time.Now()
		got, err := sb.ReadFile(ctx, path, client.FileOptions{})
		if err != nil {
			return 0, 0, err
		}
		dl.add(time.Since(t0))
		if !bytes.Equal(got, data) {
			return 0, 0, fmt.Errorf("downloaded %d bytes of %s differ from the %d uploaded", len(got), path, size)
		}
	}
	return mbps(size, ul.Quantile(0.5)), mbps(size, dl.Quantile(0.5)), nil
}

// density starts idle sandboxes until the host's MemAvailable has dropped
// by budget, most sandboxes run, or a deadline passes; it reports the
// count and the drop per sandbox in MB, and kills them all.
func density(ctx context.Context, opts *Options, c *client.Client, most int, budget int64) (count int, perMB float64, err error) {
	before, err := memAvailable()
	if err != nil {
		return 0, 0, err
	}
	var sbs []*client.Sandbox
	defer func() { killAll(context.WithoutCancel(ctx), sbs) }()
	deadline := time.Now().Add(time.Duration(opts.scale(600, 60)) * time.Second)
	for len(sbs) < most && time.Now().Before(deadline) {
		sb, _, err := createReady(ctx, c, opts.Template)
		if err != nil {
			return 0, 0, fmt.Errorf("idle sandbox %d: %w", len(sbs)+1, err)
		}
		sbs = append(sbs, sb)
		if len(sbs)%10 == 0 {
			opts.progress("density: %d idle sandboxes", len(sbs))
		}
		if now, err := memAvailable(); err == nil && before-now >= budget {
			break
		}
	}
	time.Sleep(time.Second) // let the last ones settle
	after, err := memAvailable()
	if err != nil {
		return 0, 0, err
	}
	return len(sbs), float64(before-after) / float64(len(sbs)) / 1e6, nil
}

// killAll kills sbs from 8 workers.
func killAll(ctx context.Context, sbs []*client.Sandbox) {
	ch := make(chan *client.Sandbox)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for sb := range ch {
				_ = sb.Kill(ctx)
			}
		})
	}
	for _, sb := range sbs {
		ch <- sb
	}
	close(ch)
	wg.Wait()
}

// measurePooled measures, on a server with its warm pool, serial
// create→ready (named createName) and kill, serial creates without a gap
// (with how many the pool served, from the log of srv, the run's own
// server, or nil), throughput at c=10 and c=50, the command round trip
// and transfers.
func measurePooled(ctx context.Context, opts *Options, srv *server, c *client.Client, createName string) ([]*Figure, error) {
	opts.progress("serial creates (%d, %v apart so the pool refills)", opts.Samples, opts.Gap)
	s, err := warmSerial(ctx, c, opts.Template, opts.Samples, opts.Gap)
	if err != nil {
		return nil, err
	}
	fc := latencyFigure(createName, &s.ready)
	fc.Baseline, fc.target = figFloor, poolCreateTarget()
	fc.Note = s.callNote()
	fk := latencyFigure("kill", &s.kill)
	fk.Baseline, fk.target = figFloor, p50Times(2, figFloor, "floor")
	burst, err := measureBurst(ctx, opts, srv, c, createName)
	if err != nil {
		return nil, err
	}
	figs := append([]*Figure{fc}, burst...)

	for _, tc := range []struct {
		c, total int
		floor    string
	}{{10, opts.scale(100, 10), figFloorRate10}, {50, opts.scale(200, 50), figFloorRate50}} {
		opts.progress("throughput: %d creates at concurrency %d", tc.total, tc.c)
		rate, lat, err := throughput(ctx, c, opts.Template, tc.c, tc.total)
		if err != nil {
			return nil, fmt.Errorf("throughput: %w", err)
		}
		f := &Figure{Name: fmt.Sprintf("creates/s, c=%d", tc.c), Unit: "/s", Value: rate, N: tc.total, Baseline: tc.floor,
			Note: "each worker creates, runs true, kills; the warm pool serves what it has, the rest are cold"}
		fl := latencyFigure(fmt.Sprintf("create→ready at c=%d", tc.c), lat)
		fl.Baseline = figFloor
		if tc.c == 50 {
			f.target = valueTimesAtLeast(0.15, tc.floor, "floor processes/s", "/s")
		}
		figs = append(figs, f, fl)
	}

	opts.progress("command round trip and transfers")
	sb, _, err := createReady(ctx, c, opts.Template)
	if err != nil {
		return nil, err
	}
	defer sb.Kill(context.WithoutCancel(ctx))
	cmds, err := commandFigures(ctx, sb, opts.scale(200, 10), opts.scale(100, 10), "")
	if err != nil {
		return nil, err
	}
	figs = append(figs, cmds...)
	for _, t := range []struct {
		label     string
		size, rep int
	}{{"1 MiB", 1 << 20, opts.scale(20, 3)}, {"100 MiB", 100 << 20, opts.scale(3, 1)}} {
		up, down, err := transfer(ctx, sb, t.size, t.rep)
		if err != nil {
			return nil, fmt.Errorf("transfer of %s: %w", t.label, err)
		}
		fu := &Figure{Name: "upload " + t.label, Unit: "MB/s", Value: up, N: t.rep, Baseline: figLoopback}
		fd := &Figure{Name: "download " + t.label, Unit: "MB/s", Value: down, N: t.rep, Baseline: figLoopback}
		if t.size == 100<<20 {
			fu.target = valueTimesAtLeast(0.8, figLoopback, "loopback HTTP", "MB/s")
			fd.target = valueTimesAtLeast(0.8, figLoopback, "loopback HTTP", "MB/s")
		}
		figs = append(figs, fu, fd)
	}
	return append(figs, fk), nil
}

// measureBurst measures opts.Samples serial creates without a gap, as an
// agent loop makes them, and on the run's own server (srv) how many of
// them the warm pool served, from its log.
func measureBurst(ctx context.Context, opts *Options, srv *server, c *client.Client, createName string) ([]*Figure, error) {
	opts.progress("serial creates without a gap (%d)", opts.Samples)
	var off int64
	if srv != nil {
		off = srv.logSize()
	}
	s, err := serialCreates(ctx, c, opts.Template, opts.Samples, 0)
	if err != nil {
		return nil, fmt.Errorf("serial creates without a gap: %w", err)
	}
	f := latencyFigure(createName+", no gap", &s.ready)
	f.Baseline = createName
	if srv == nil {
		return []*Figure{f, skipped(figPoolHits, "needs a server of its own (run without --server)")}, nil
	}
	log, err := srv.logSince(off)
	if err != nil {
		return nil, err
	}
	hits := len(log.with(logPoolCreate, nil))
	h := &Figure{Name: figPoolHits, Unit: "creates", Value: float64(hits), N: opts.Samples, target: valueAtLeast(float64(opts.Samples), "creates"),
		Note: fmt.Sprintf("%d of %d creates without a gap took a pool member (%d booted one)", hits, opts.Samples, len(log.with(logColdCreate, nil)))}
	return []*Figure{f, h}, nil
}

// measureCold measures, on a server without a pool (own), serial
// create→ready; and on any server, density.
func measureCold(ctx context.Context, opts *Options, c *client.Client, own bool) ([]*Figure, error) {
	var figs []*Figure
	if own {
		opts.progress("serial creates without a pool (%d)", opts.Samples)
		s, err := warmSerial(ctx, c, opts.Template, opts.Samples, 0)
		if err != nil {
			return nil, fmt.Errorf("without a pool: %w", err)
		}
		f := latencyFigure(figColdCreate, &s.ready)
		f.Baseline, f.target = figBwrap, p50Times(2, figBwrap, "bwrap start")
		f.Note = s.callNote()
		figs = append(figs, f)
	}
	opts.progress("density: idle sandboxes until MemAvailable drops by %d MiB (at most %d)", opts.MemoryBudget>>20, opts.MaxIdle)
	count, per, err := density(ctx, opts, c, opts.MaxIdle, opts.MemoryBudget)
	if err != nil {
		return nil, fmt.Errorf("density: %w", err)
	}
	fm := &Figure{Name: figIdleMemory, Unit: "MB", Value: per, N: count, Baseline: figFloorMem, target: valueAtMost(4, "MB"),
		Note: "host MemAvailable drop over the idle sandboxes started, per sandbox; other work on the host moves it"}
	fn := &Figure{Name: "idle sandboxes started in the budget", Unit: "sandboxes", Value: float64(count), N: count}
	figs = append(figs, fm, fn)
	if per > 0 {
		figs = append(figs, &Figure{Name: "idle sandboxes per 24 GiB (extrapolated)", Unit: "sandboxes", Value: float64(24<<30) / (per * 1e6), N: count,
			Note: "24 GiB divided by the measured memory per idle sandbox, not a run to 1,000"})
	}
	return figs, nil
}
