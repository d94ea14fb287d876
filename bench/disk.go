package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/agent-sandbox/agent-sandbox/client"
)

// fsyncProbe writes 4 KiB and fsyncs it, n times (its first argument)
// with a pause (its second, in ms) between, and prints each write+fsync's
// time in ns: timed inside the sandbox, so that the round trip of a command
// does not hide a millisecond of fsync. The pauses spread the samples over
// seconds, across the host's periodic writeback of the hog's data.
const fsyncProbe = `import os, sys, time
fd = os.open("/home/user/fsync-probe", os.O_WRONLY | os.O_CREAT, 0o644)
buf = b"x" * 4096
for i in range(int(sys.argv[1])):
    t = time.perf_counter_ns()
    os.pwrite(fd, buf, (i % 256) * 4096)
    os.fsync(fd)
    print(time.perf_counter_ns() - t)
    time.sleep(int(sys.argv[2]) / 1000)
`

// fsyncGap is the pause between two timed writes.
const fsyncGap = 10 * time.Millisecond

// diskHog writes its sandbox's disk as fast as its quota lets it, with
// direct I/O so that the cap holds on cgroup v1 too (which does not charge
// buffered writeback to the writer), over 768 MiB of its 1 GiB disk so
// that the host sees ever new data to write back.
const diskHog = `while :; do for f in 1 2 3; do dd if=/dev/zero of=/home/user/hog$f bs=1M count=256 oflag=direct 2>/dev/null; done; done`

const figFsyncAlone = "small write+fsync, quiet sandbox alone"

// measureDiskNeighbour times a 4 KiB write+fsync in a quiet sandbox alone,
// then while another sandbox runs a direct-I/O disk hog at its default
// quota. Both sandboxes' disks are files on the same host disk, so the
// hog's quota is what keeps the quiet sandbox's fsync latency; its p99 is
// held to 3× the one alone.
func measureDiskNeighbour(ctx context.Context, opts *Options, c *client.Client) ([]*Figure, error) {
	n := opts.scale(1000, 30)
	opts.progress("disk neighbour: %d small write+fsync %v apart alone, then beside a disk hog", n, fsyncGap)
	quiet, _, err := createReady(ctx, c, opts.Template)
	if err != nil {
		return nil, err
	}
	defer quiet.Kill(context.WithoutCancel(ctx))
	if _, err := fsyncs(ctx, quiet, 20); err != nil { // warm-up
		return nil, err
	}
	alone, err := fsyncs(ctx, quiet, n)
	if err != nil {
		return nil, err
	}
	hog, _, err := createReady(ctx, c, opts.Template)
	if err != nil {
		return nil, fmt.Errorf("creating the disk hog's sandbox: %w", err)
	}
	defer hog.Kill(context.WithoutCancel(ctx))
	start := fmt.Sprintf("setsid -f bash -c %s >/dev/null 2>&1 </dev/null", shellQuote(diskHog))
	if code, err := hog.Run(ctx, start, client.RunOptions{}); err != nil || code != 0 {
		return nil, fmt.Errorf("starting the disk hog: exit %d, %v", code, err)
	}
	time.Sleep(neighbourSettle)
	loaded, err := fsyncs(ctx, quiet, n)
	if err != nil {
		return nil, err
	}
	fa := latencyFigure(figFsyncAlone, alone)
	fl := latencyFigure("small fsync write beside a disk hog", loaded)
	fl.Baseline = figFsyncAlone
	fl.target = p99Times(3, figFsyncAlone, "alone")
	fl.Note = fmt.Sprintf("p99 %.2f× the p99 alone; the hog runs dd oflag=direct in a sandbox of its own, at the default --disk-io", fl.P99/fa.P99)
	return []*Figure{fa, fl}, nil
}

// fsyncs runs fsyncProbe for n writes in sb and returns their times.
func fsyncs(ctx context.Context, sb *client.Sandbox, n int) (*Latency, error) {
	var out, errb bytes.Buffer
	cmd := fmt.Sprintf("python3 -c %s %d %d", shellQuote(fsyncProbe), n, fsyncGap.Milliseconds())
	code, err := sb.Run(ctx, cmd, client.RunOptions{Stdout: &out, Stderr: &errb})
	if err == nil && code != 0 {
		err = fmt.Errorf("exit code %d: %s", code, bytes.TrimSpace(errb.Bytes()))
	}
	if err != nil {
		return nil, fmt.Errorf("timing write+fsync: %w", err)
	}
	l := &Latency{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		ns, err := strconv.ParseInt(sc.Text(), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("timing write+fsync: parsing %q: %w", sc.Text(), err)
		}
		l.add(time.Duration(ns))
	}
	if len(l.Samples) != n {
		return nil, fmt.Errorf("timing write+fsync: %d samples, want %d", len(l.Samples), n)
	}
	return l, nil
}
