package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/agent-sandbox/agent-sandbox/client"
)

// bombs are the abusive neighbours, each started detached in a sandbox of
// its own: it keeps going after the command that started it returns.
var bombs = []struct{ name, cmd string }{
	{"fork bomb", `b(){ b|b& }; b`},
	{"memory bomb", `while :; do python3 -c 'a=[]
while True: a.append(bytearray(64<<20))'; done`},
	{"CPU hog", `for i in 1 2 3 4 5 6 7 8; do (while :; do :; done) & done; wait`},
}

// neighbourSettle is how long the bombs run before the loaded samples, so
// that the fork bomb has reached its pids limit and the memory bomb its
// first OOM kill.
const neighbourSettle = 3 * time.Second

// measureNeighbours times commands.run('true') in a quiet sandbox alone,
// then while three other sandboxes run a fork bomb, a memory bomb and a
// CPU hog, twice: with the bombs detached from envd and their output
// discarded, and as envd commands streaming their output to this client,
// as commands.run(cmd, {background: true}) runs them. The second is what
// users do, and its p99 is held to 3× the quiet one.
func measureNeighbours(ctx context.Context, opts *Options, c *client.Client) ([]*Figure, error) {
	n := opts.scale(300, 20)
	opts.progress("noisy neighbours: %d runs of true alone, then beside %d bombs, twice", n, len(bombs))
	quiet, _, err := createReady(ctx, c, opts.Template)
	if err != nil {
		return nil, err
	}
	defer quiet.Kill(context.WithoutCancel(ctx))
	if _, err := runTrue(ctx, quiet, 10); err != nil { // warm-up
		return nil, fmt.Errorf("commands.run('true'): %w", err)
	}
	alone, err := runTrue(ctx, quiet, n)
	if err != nil {
		return nil, fmt.Errorf("commands.run('true') alone: %w", err)
	}
	fa := latencyFigure(figQuietAlone, alone)
	figs := []*Figure{fa}
	for _, streamed := range []bool{false, true} {
		loaded, err := besideBombs(ctx, opts, c, quiet, n, streamed)
		if err != nil {
			return nil, err
		}
		how := "detached, output discarded"
		if streamed {
			how = "envd commands, output streamed"
		}
		f := latencyFigure("commands.run('true') beside a fork bomb, memory bomb, CPU hog ("+how+")", loaded)
		f.Baseline = figQuietAlone
		if streamed {
			f.target = p99Times(3, figQuietAlone, "alone")
		}
		f.Note = fmt.Sprintf("p99 %.2f× the p99 alone; each bomb runs in a sandbox of its own, with the default limits", f.P99/fa.P99)
		figs = append(figs, f)
	}
	return figs, nil
}

// besideBombs starts the bombs, each in a new sandbox, and times n runs of
// true in quiet once they have settled; the bomb sandboxes are killed on
// return.
func besideBombs(ctx context.Context, opts *Options, c *client.Client, quiet *client.Sandbox, n int, streamed bool) (*Latency, error) {
	bctx, stop := context.WithCancel(ctx)
	defer stop()
	var noisy []*client.Sandbox
	defer func() { killAll(context.WithoutCancel(ctx), noisy) }()
	for _, b := range bombs {
		sb, _, err := createReady(ctx, c, opts.Template)
		if err != nil {
			return nil, fmt.Errorf("creating the %s's sandbox: %w", b.name, err)
		}
		noisy = append(noisy, sb)
		if streamed {
			// It runs until its sandbox is killed.
			go sb.Run(bctx, b.cmd, client.RunOptions{Stdout: io.Discard, Stderr: io.Discard})
			continue
		}
		start := fmt.Sprintf("setsid -f bash -c %s >/dev/null 2>&1 </dev/null", shellQuote(b.cmd))
		code, err := sb.Run(ctx, start, client.RunOptions{})
		if err == nil && code != 0 {
			err = fmt.Errorf("exit code %d", code)
		}
		if err != nil {
			return nil, fmt.Errorf("starting the %s: %w", b.name, err)
		}
	}
	time.Sleep(neighbourSettle)
	loaded, err := runTrue(ctx, quiet, n)
	if err != nil {
		return nil, fmt.Errorf("commands.run('true') beside the bombs: %w", err)
	}
	return loaded, nil
}

const figQuietAlone = "commands.run('true'), quiet sandbox alone"

// shellQuote quotes s as one single-quoted shell word.
func shellQuote(s string) string {
	out := []byte{'\''}
	for i := range len(s) {
		if s[i] == '\'' {
			out = append(out, `'\''`...)
		} else {
			out = append(out, s[i])
		}
	}
	return string(append(out, '\''))
}
