package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// floorFlags are the namespaces the jail gives every sandbox (its clone
// flags, the network namespace it enters first, and the cgroup namespace
// it unshares): the cost of isolation before anything is set up in them.
const floorFlags = unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP

// floorCmd is a fork into new namespaces and an exec of argv.
func floorCmd(argv ...string) *exec.Cmd {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &unix.SysProcAttr{Cloneflags: floorFlags}
	return cmd
}

// timeRuns runs n commands made by mk one after another and times each
// from fork to exit.
func timeRuns(ctx context.Context, n int, mk func() *exec.Cmd) (*Latency, error) {
	l := &Latency{}
	for range n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		cmd := mk()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		t0 := time.Now()
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("running %v: %w: %s", cmd.Args, err, bytes.TrimSpace(stderr.Bytes()))
		}
		l.add(time.Since(t0))
	}
	return l, nil
}

// floorRate runs total floor processes from c workers and returns their
// rate per second.
func floorRate(ctx context.Context, c, total int) (float64, error) {
	var mu sync.Mutex
	var firstErr error
	next := make(chan struct{}, total)
	for range total {
		next <- struct{}{}
	}
	close(next)
	var wg sync.WaitGroup
	t0 := time.Now()
	for range c {
		wg.Go(func() {
			for range next {
				if ctx.Err() != nil {
					return
				}
				if err := floorCmd("/bin/true").Run(); err != nil {
					mu.Lock()
					firstErr = firstOf(firstErr, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return 0, fmt.Errorf("isolation floor at concurrency %d: %w", c, firstErr)
	}
	return float64(total) / time.Since(t0).Seconds(), nil
}

func firstOf(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// floorMemory starts n idle processes in new namespaces (exec'd sleep) and
// returns the host memory each takes, from MemAvailable before and after.
func floorMemory(ctx context.Context, n int) (float64, error) {
	before, err := memAvailable()
	if err != nil {
		return 0, err
	}
	var cmds []*exec.Cmd
	defer func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}()
	for range n {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		c := floorCmd("/bin/sleep", "600")
		if err := c.Start(); err != nil {
			return 0, fmt.Errorf("starting an idle process in new namespaces: %w", err)
		}
		cmds = append(cmds, c)
	}
	time.Sleep(200 * time.Millisecond) // let them all reach sleep
	after, err := memAvailable()
	if err != nil {
		return 0, err
	}
	return float64(before-after) / float64(n) / 1e6, nil
}

// bwrapArgs runs /bin/true in bubblewrap with every namespace it offers
// and the host's root read-only: the start cost of a comparable sandbox.
var bwrapArgs = []string{"--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--", "/bin/true"}

// runscArgs runs /bin/true under gVisor with the host's root (runsc do).
var runscArgs = []string{"--network=none", "do", "/bin/true"}

// lookTool finds a tool for a baseline, or says why it is skipped.
func lookTool(name string) (string, string) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", name + " is not installed"
	}
	return p, ""
}

// loopbackHTTP moves size bytes over HTTP on loopback to a server that
// discards them, reps times, and returns the median MB/s: the floor of a
// transfer through any HTTP proxy on this host.
func loopbackHTTP(ctx context.Context, size, reps int) (float64, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	body := make([]byte, size)
	l := &Latency{}
	client := &http.Client{}
	for range reps {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+ln.Addr().String()+"/", bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		t0 := time.Now()
		res, err := client.Do(req)
		if err != nil {
			return 0, fmt.Errorf("loopback HTTP: %w", err)
		}
		res.Body.Close()
		l.add(time.Since(t0))
	}
	return mbps(size, l.Quantile(0.5)), nil
}

// baselines measures every baseline on this host.
func baselines(ctx context.Context, opts *Options) ([]*Figure, error) {
	opts.progress("baselines: isolation floor, bwrap, runsc, host bash, loopback HTTP")
	n := opts.scale(200, 10)
	floor, err := timeRuns(ctx, n, func() *exec.Cmd { return floorCmd("/bin/true") })
	if err != nil {
		return nil, fmt.Errorf("isolation floor: %w", err)
	}
	figs := []*Figure{latencyFigure(figFloor, floor)}
	for _, rc := range []struct {
		name     string
		c, total int
	}{{figFloorRate10, 10, opts.scale(500, 50)}, {figFloorRate50, 50, opts.scale(1000, 100)}} {
		rate, err := floorRate(ctx, rc.c, rc.total)
		if err != nil {
			return nil, err
		}
		figs = append(figs, &Figure{Name: rc.name, Unit: "/s", Value: rate, N: rc.total})
	}
	for _, tool := range []struct {
		name, bin string
		args      []string
	}{{figBwrap, "bwrap", bwrapArgs}, {"runsc start (true)", "runsc", runscArgs}} {
		path, why := lookTool(tool.bin)
		if why != "" {
			figs = append(figs, skipped(tool.name, why))
			continue
		}
		l, err := timeRuns(ctx, opts.scale(50, 5), func() *exec.Cmd { return exec.Command(path, tool.args...) })
		if err != nil {
			figs = append(figs, skipped(tool.name, err.Error()))
			continue
		}
		f := latencyFigure(tool.name, l)
		f.Baseline = figFloor
		figs = append(figs, f)
	}
	bash, err := timeRuns(ctx, n, func() *exec.Cmd { return exec.Command("/bin/bash", "-l", "-c", "true") })
	if err != nil {
		return nil, fmt.Errorf("host bash: %w", err)
	}
	figs = append(figs, latencyFigure(figHostBash, bash))
	lo, err := loopbackHTTP(ctx, 100<<20, opts.scale(5, 2))
	if err != nil {
		return nil, err
	}
	figs = append(figs, &Figure{Name: figLoopback, Unit: "MB/s", Value: lo, N: opts.scale(5, 2)})
	perProc, err := floorMemory(ctx, opts.scale(200, 20))
	if err != nil {
		return nil, fmt.Errorf("idle namespaced processes: %w", err)
	}
	figs = append(figs, &Figure{Name: figFloorMem, Unit: "MB", Value: perProc, N: opts.scale(200, 20),
		Note: "host MemAvailable drop per idle process (exec'd sleep in new namespaces); noisy on a shared host"})
	return figs, nil
}
