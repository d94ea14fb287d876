package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agent-sandbox/agent-sandbox/client"
)

// measureLifecycle measures, on the pooled server, what the lifecycle
// calls cost beside createName, its create→ready: forking an idle
// sandbox (one fork, and ten), making a snapshot, creating from one, and
// the first answer of a paused sandbox that traffic wakes.
func measureLifecycle(ctx context.Context, opts *Options, c *client.Client, createName string) ([]*Figure, error) {
	opts.progress("lifecycle: fork, snapshot, create from snapshot, auto-resume")
	parent, _, err := createReady(ctx, c, opts.Template)
	if err != nil {
		return nil, err
	}
	defer parent.Kill(context.WithoutCancel(ctx))
	var figs []*Figure
	for _, n := range []int{1, 10} {
		lat, err := timedForks(ctx, c, parent.ID, n, opts.scale(10, 2))
		if err != nil {
			return nil, fmt.Errorf("forks of %d: %w", n, err)
		}
		f := latencyFigure(fmt.Sprintf("fork of an idle sandbox, %d %s", n, plural(n, "child", "children")), lat)
		f.Baseline = createName
		f.Note = "POST /sandboxes/{id}/fork until every fork is ready; the response's mode says whether forks keep processes"
		if n == 10 {
			f.target = p50AtMost(250)
		}
		figs = append(figs, f)
	}

	snapLat, fromLat := &Latency{}, &Latency{}
	for range opts.scale(10, 2) {
		t0 := time.Now()
		snap, err := c.CreateSnapshot(ctx, parent.ID, "")
		if err != nil {
			return nil, err
		}
		snapLat.add(time.Since(t0))
		sb, d, err := createReady(ctx, c, snap.ID)
		if err == nil {
			fromLat.add(d.ready)
			err = sb.Kill(ctx)
		}
		err = errors.Join(err, c.DeleteSnapshot(context.WithoutCancel(ctx), snap.ID))
		if err != nil {
			return nil, fmt.Errorf("snapshot %s: %w", snap.ID, err)
		}
	}
	fs := latencyFigure("snapshot create", snapLat)
	fs.Baseline = createName
	ff := latencyFigure("create→ready from a snapshot", fromLat)
	ff.Baseline = createName
	figs = append(figs, fs, ff)

	wake, err := autoResumes(ctx, c, opts.Template, opts.scale(20, 2))
	if err != nil {
		return nil, fmt.Errorf("auto-resume: %w", err)
	}
	fw := latencyFigure("auto-resume: first answer of a paused sandbox", wake)
	fw.Baseline = createName
	fw.Note = "envd's GET /health through the router to a sandbox paused with autoResume, which the request wakes"
	return append(figs, fw), nil
}

// timedForks forks parent into n children, reps times, killing the
// children after each, and returns the time of each fork call.
func timedForks(ctx context.Context, c *client.Client, parent string, n, reps int) (*Latency, error) {
	lat := &Latency{}
	for range reps {
		t0 := time.Now()
		forks, errs, _, err := c.Fork(ctx, parent, client.ForkOptions{Count: n, Timeout: sandboxTimeout})
		d := time.Since(t0)
		for _, f := range forks {
			if f != nil {
				_ = f.Kill(context.WithoutCancel(ctx))
			}
		}
		if err := errors.Join(append(errs, err)...); err != nil {
			return nil, err
		}
		lat.add(d)
	}
	return lat, nil
}

// autoResumes pauses an idle sandbox made with autoResume n times and
// times the request that wakes it each time.
func autoResumes(ctx context.Context, c *client.Client, tmpl string, n int) (*Latency, error) {
	sb, err := c.CreateSandbox(ctx, client.CreateOptions{Template: tmpl, Timeout: sandboxTimeout, AutoResume: true})
	if err != nil {
		return nil, err
	}
	defer sb.Kill(context.WithoutCancel(ctx))
	lat := &Latency{}
	for range n {
		if err := c.Pause(ctx, sb.ID, true); err != nil {
			return nil, err
		}
		t0 := time.Now()
		ok, err := sb.IsRunning(ctx)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, errors.New("a request to a paused sandbox with autoResume got 502: it was not woken")
		}
		lat.add(time.Since(t0))
	}
	return lat, nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
