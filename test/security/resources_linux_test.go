package security

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/gen/process"
	"github.com/agent-sandbox/agent-sandbox/gen/process/processconnect"
	"github.com/agent-sandbox/agent-sandbox/internal/cgroup"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// Bounds on what a bomb may cost the host.
const (
	floodMB  = 1024      // output of the stdout flood
	rssBound = 128 << 20 // growth of envd's or the test's RSS during it
)

func testResources(t *testing.T, h *harness, tb *table) {
	// Each bomb in a sandbox of its own, one after the other, so that
	// their effects on the host are told apart.
	for _, bomb := range []func(*testing.T, *harness, *table, store.Sandbox){forkBomb, memoryBomb, diskFill, inodeFlood, fdFlood} {
		bomb(t, h, tb, h.create(""))
	}
	stdoutFlood(t, h, tb, h.create(""))
	stalledReader(t, h, tb, h.create(""))
}

// forkBomb starts children until the pids limit stops it, and while they
// hold every pid, asks envd for /health.
func forkBomb(t *testing.T, h *harness, tb *table, sb store.Sandbox) {
	var during string
	var healthy bool
	var started int
	r := h.runStream(sb, "user", func(b []byte) {
		if !strings.HasPrefix(string(b), "started=") {
			return
		}
		fmt.Sscanf(string(b), "started=%d", &started)
		code, err := h.health(sb)
		healthy = err == nil && code/100 == 2
		during = fmt.Sprintf("%s; host group's pids %s of %s; /health during: %d %v",
			strings.TrimSpace(string(b)), h.cgroupFile(sb, "pids", "pids.current"), h.cgroupFile(sb, "pids", "pids.max"), code, err)
	}, "fork", "5000", "4")
	after := h.probe(sb, "user", "stat", "/")
	if h.gvisor() {
		// Under the ptrace platform every process of the sandbox has a
		// host stub process in the sandbox's group: the group's pids
		// limit stops the bomb, and the sentry, which cannot make a stub,
		// ends the sandbox.
		ended := h.endedWhy(sb)
		next := h.create("")
		code, err := h.health(next)
		tb.add(t, outcome{attack: "fork bomb (5000 children)", as: "user",
			expected:  "the host group's pids limit stops it and gVisor's kernel ends the sandbox; the next sandbox starts and answers",
			observed:  fmt.Sprintf("%s; afterwards: %s; %s; the next sandbox's /health %d %v", during, after, ended, code, err),
			contained: strings.Contains(ended, "it ended at") && err == nil && code/100 == 2})
		return
	}
	tb.add(t, outcome{attack: "fork bomb (5000 children)", as: "user",
		expected:  "forks (the control: 100 or more children), then EAGAIN at the pids limit; envd answers; commands run afterwards",
		observed:  fmt.Sprintf("%s; afterwards: %s", during, after),
		contained: r.err == nil && started >= 100 && healthy && strings.Contains(during, "err=EAGAIN") && after == "ok"})
}

// oomSlack is how far past its limit a memory cgroup's peak may go: the
// kernel lets a task it is killing for OOM charge a few more pages so that
// it can exit (measured: 2 pages).
const oomSlack = 1 << 20

// vmAllowanceMB is the most the vm backend lets QEMU use beyond the
// guest's memory in its host group (under TCG: its heap and the
// translation cache).
const vmAllowanceMB = 128

// memoryBomb allocates far more than the sandbox's memory limit. On the
// host, the sandbox's memory group (the jail's, or the VM's QEMU
// process's) must stay within its limit.
func memoryBomb(t *testing.T, h *harness, tb *table, sb store.Sandbox) {
	oomFile, peakFile, limitFile := "memory.oom_control", "memory.max_usage_in_bytes", "memory.limit_in_bytes"
	if mode, _ := cgroup.Detect(); mode == cgroup.V2 {
		oomFile, peakFile, limitFile = "memory.events", "memory.peak", "memory.max"
	}
	expected := "the bomb is OOM-killed in the sandbox; envd answers; the group stays within its limit (+1 MiB the kernel lets a dying task charge)"
	maxLimit := int64(memoryMB) << 20
	// The OOM kills that count the bomb's: the jail's group's, or in a
	// VM the guest kernel's own, while QEMU's group on the host must
	// see none.
	kills := func() string { return oomKillCount(h.cgroupFile(sb, "memory", oomFile)) }
	if h.vm() {
		expected = "the bomb is OOM-killed by the guest's kernel; envd answers; QEMU's host group stays within its limit " +
			"(guest memory + QEMU's allowance, +1 MiB) with no OOM kill of its own"
		maxLimit += vmAllowanceMB << 20
		kills = func() string { return strings.TrimPrefix(h.probe(sb, "root", "oomkills"), "ok ") }
	}
	// The control: a fresh sandbox has no OOM kill yet, so the one after
	// is this bomb's.
	before := kills()
	if h.gvisor() {
		gvisorMemoryBomb(t, h, tb, sb, before, peakFile, limitFile)
		return
	}
	r := h.run(sb, "user", "alloc", strconv.Itoa(4*memoryMB))
	after := kills()
	hostKills := oomKillCount(h.cgroupFile(sb, "memory", oomFile))
	code, err := h.health(sb)
	rec, gerr := h.m.Get(context.Background(), sb.ID)
	peak, _ := strconv.ParseInt(h.cgroupFile(sb, "memory", peakFile), 10, 64)
	limit, _ := strconv.ParseInt(h.cgroupFile(sb, "memory", limitFile), 10, 64)
	tb.add(t, outcome{attack: fmt.Sprintf("memory bomb (%d MB in a %d MB sandbox)", 4*memoryMB, memoryMB), as: "user",
		expected: expected,
		observed: fmt.Sprintf("%q exit %d (%s); oom_kill %s before, %s after (host group: %s); /health %d %v; state %s (%v); group peak %d of %d bytes",
			r.out, r.exit, r.status, before, after, hostKills, code, err, rec.State, gerr, peak, limit),
		contained: strings.Contains(r.status, "killed") && before == "0" && after == "1" && (!h.vm() || hostKills == "0") &&
			err == nil && code/100 == 2 && gerr == nil && rec.State == store.StateRunning &&
			limit > 0 && limit <= maxLimit && peak > 0 && peak <= limit+oomSlack})
}

// gVisorSentryMB is what the gvisor backend lets the sentry use beyond
// the sandbox's memory in its group.
const gvisorSentryMB = 64

// gvisorMemoryBomb: gVisor's kernel does not keep its processes within
// the group's limit, so the host's OOM killer ends the sandbox as a
// whole, with reason oom; the group stays within its limit.
func gvisorMemoryBomb(t *testing.T, h *harness, tb *table, sb store.Sandbox, before, peakFile, limitFile string) {
	peaks := newPeak(func() (int64, int64) {
		peak, _ := strconv.ParseInt(h.cgroupFile(sb, "memory", peakFile), 10, 64)
		limit, _ := strconv.ParseInt(h.cgroupFile(sb, "memory", limitFile), 10, 64)
		return peak, limit
	})
	r := h.run(sb, "user", "alloc", strconv.Itoa(4*memoryMB))
	ended := h.endedWhy(sb)
	peak, limit := peaks.stop()
	tb.add(t, outcome{attack: fmt.Sprintf("memory bomb (%d MB in a %d MB sandbox)", 4*memoryMB, memoryMB), as: "user",
		expected: fmt.Sprintf("the host's OOM killer ends the sandbox (reason oom); its group stays within its limit (the sandbox's memory + %d MiB for the sentry, +1 MiB)", gvisorSentryMB),
		observed: fmt.Sprintf("%q exit %d (%s); oom_kill %s before; %s; group peak %d of %d bytes", r.out, r.exit, r.status, before, ended, peak, limit),
		contained: before == "0" && strings.Contains(ended, "oom") &&
			limit > 0 && limit <= int64(memoryMB+gvisorSentryMB)<<20 && peak > 0 && peak <= limit+oomSlack})
}

// oomKillCount is the oom_kill count in a memory.oom_control or
// memory.events file, "" if it has none.
func oomKillCount(file string) string {
	for _, l := range strings.Split(file, "\n") {
		if v, ok := strings.CutPrefix(l, "oom_kill "); ok {
			return v
		}
	}
	return ""
}

// diskFill writes until the sandbox's disk is full. What it costs the
// host is the blocks its sparse disk image takes.
func diskFill(t *testing.T, h *harness, tb *table, sb store.Sandbox) {
	got := h.probe(sb, "user", "fill", "/home/user/big")
	var mb int
	fmt.Sscanf(got, "ok wrote %d MB", &mb)
	image := h.s.Disk(sb)
	var st unix.Stat_t
	serr := unix.Stat(image, &st)
	used := st.Blocks * 512
	tb.add(t, outcome{attack: fmt.Sprintf("disk fill (in a %d MB sandbox disk)", diskMB), as: "user",
		expected:  fmt.Sprintf("writes (the control: ≥ %d MB), then ENOSPC inside; its image takes ≤ %d MB of the host disk", diskMB/2, diskMB),
		observed:  fmt.Sprintf("%s; image %s uses %d MB of the host disk %v", got, filepath.Base(image), used>>20, errOrEmpty(serr)),
		contained: mb >= diskMB/2 && strings.HasSuffix(got, "ENOSPC") && serr == nil && used > 0 && used <= diskMB<<20})
}

// inodeFlood creates empty files until the sandbox's filesystem has no
// inodes left: they are all inside its image, so the host's sandbox
// directory holds as many files as before.
func inodeFlood(t *testing.T, h *harness, tb *table, sb store.Sandbox) {
	dir := filepath.Join(h.s.StateDir, sb.ID)
	// The control: the jail's disk is a fresh ext4 of diskMB, with an
	// inode per 16 KiB; a VM's root is the template's image grown to the
	// disk, with the image's few inodes per group, so there the flood
	// must take nine tenths of what statfs showed free first.
	want, expected := 10000, "creates files (the control: ≥ 10000), then ENOSPC inside (its own ext4 image); no host inodes taken"
	if h.vm() {
		var free int
		fmt.Sscanf(h.probe(sb, "user", "inodes-free", "/home/user"), "ok %d", &free)
		want = max(free*9/10, 1000)
		expected = fmt.Sprintf("creates files (the control: ≥ 9/10 of the %d inodes statfs showed free, and ≥ 1000), "+
			"then ENOSPC inside (its own disk); no host inodes taken", free)
	}
	before := countFiles(dir)
	got := h.probe(sb, "user", "inodes", "/home/user/many")
	after := countFiles(dir)
	var n int
	fmt.Sscanf(got, "ok created %d files", &n)
	tb.add(t, outcome{attack: "inode exhaustion (empty files)", as: "user",
		expected:  expected,
		observed:  fmt.Sprintf("%s; files in its host directory: %d before, %d after", got, before, after),
		contained: n >= want && strings.HasSuffix(got, "ENOSPC") && before > 0 && after == before})
}

func countFiles(dir string) int {
	n := 0
	filepath.WalkDir(dir, func(string, fs.DirEntry, error) error { n++; return nil })
	return n
}

func errOrEmpty(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// fdFlood opens files until the descriptor limit, as user and as root,
// trying first to raise the hard limit.
func fdFlood(t *testing.T, h *harness, tb *table, sb store.Sandbox) {
	for _, u := range users {
		r := h.run(sb, u, "fds")
		got := r.out
		if strings.Contains(r.status, "killed") {
			got = "killed (" + r.status + ") before reaching the limit, by the memory limit"
		}
		// gVisor's open files are its kernel's memory: past the group's
		// limit the host's OOM killer ends the sandbox (memoryBomb).
		oomEnded := false
		if h.gvisor() && r.err != nil {
			got = fmt.Sprintf("%v; %s", r.err, h.endedWhy(sb))
			oomEnded = strings.HasSuffix(got, "(oom)")
		}
		var n int
		fmt.Sscanf(got, "ok opened %d", &n)
		bounded := n >= 1000 && strings.Contains(got, "then EMFILE") && strings.HasSuffix(got, "raising it: EPERM")
		tb.add(t, outcome{attack: "open-files flood (raise RLIMIT_NOFILE, open until failure)", as: u,
			expected: h.orGvisor("opens (the control: ≥ 1000), then EMFILE at the hard limit (raising it EPERM), or the memory limit first",
				"opens (the control: ≥ 1000), then EMFILE at the hard limit (raising it EPERM), or the memory limit first (the sandbox ends, reason oom)"),
			observed: got, contained: oomEnded || r.err == nil && (bounded || strings.Contains(r.status, "killed"))})
	}
}

// stdoutFlood prints floodMB to stdout and reads it all, watching envd's
// and the test process's memory.
func stdoutFlood(t *testing.T, h *harness, tb *table, sb store.Sandbox) {
	mb := floodMB
	if h.vm() {
		// Twice the RSS bound, still more than envd could hold unnoticed:
		// an emulated guest streams some 6 MB/s, and a whole floodMB
		// would take three minutes of CI.
		mb = 2 * rssBound >> 20
	}
	envd0, self0 := h.envdRSS(sb), rssOf("self")
	peak := newPeak(func() (int64, int64) { return h.envdRSS(sb), rssOf("self") })
	var n int64
	t0 := time.Now()
	r := h.runStream(sb, "user", func(b []byte) { n += int64(len(b)) }, "flood", strconv.Itoa(mb))
	envdPeak, selfPeak := peak.stop()
	code, err := h.health(sb)
	tb.add(t, outcome{attack: fmt.Sprintf("stdout flood (%d MB), read by the client", mb), as: "user",
		expected: fmt.Sprintf("streamed; envd and manager-side RSS grow < %d MB", rssBound>>20),
		observed: fmt.Sprintf("received %d MB in %s, exit %d %v; envd RSS %d→peak %d MB; test RSS %d→peak %d MB; /health %d",
			n>>20, time.Since(t0).Round(time.Millisecond), r.exit, r.err, envd0>>20, envdPeak>>20, self0>>20, selfPeak>>20, code),
		contained: r.err == nil && n >= int64(mb)<<20 && err == nil && code/100 == 2 &&
			envdPeak-envd0 < rssBound && selfPeak-self0 < rssBound})
}

// stalledReader starts the flood and stops reading it: envd must not
// buffer what the client does not take.
func stalledReader(t *testing.T, h *harness, tb *table, sb store.Sandbox) {
	envd0 := h.envdRSS(sb)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pc := processconnect.NewProcessClient(h.client(sb), "http://envd", connect.WithProtoJSON())
	req := connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "/usr/bin/probe", Args: []string{"flood", strconv.Itoa(4 * floodMB)}}})
	req.Header().Set("X-Access-Token", sb.EnvdAccessToken)
	req.Header().Set("Authorization", basicAuth("user"))
	stream, err := pc.Start(ctx, req)
	if err != nil {
		t.Fatalf("starting the flood: %v", err)
	}
	started := stream.Receive() // the start event; then nothing is read
	peak := newPeak(func() (int64, int64) { return h.envdRSS(sb), 0 })
	time.Sleep(5 * time.Second)
	envdPeak, _ := peak.stop()
	cancel()
	stream.Close()
	code, herr := h.health(sb)
	rec, _ := h.m.Get(context.Background(), sb.ID)
	tb.add(t, outcome{attack: fmt.Sprintf("stdout flood (%d MB), client stops reading for 5 s", 4*floodMB), as: "user",
		expected:  fmt.Sprintf("the flood starts and envd's RSS is read (the controls); envd blocks the writer; its RSS grows < %d MB; sandbox alive", rssBound>>20),
		observed:  fmt.Sprintf("started=%v; envd RSS %d→peak %d MB; /health %d %v; state %s %s", started, envd0>>20, envdPeak>>20, code, herr, rec.State, rec.Reason),
		contained: started && envd0 > 0 && envdPeak-envd0 < rssBound && herr == nil && code/100 == 2 && rec.State == store.StateRunning})
}

// peak samples two values every 50 ms and keeps their maxima.
type peak struct {
	stopc chan struct{}
	done  chan struct{}
	a, b  int64
}

func newPeak(sample func() (int64, int64)) *peak {
	p := &peak{stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			a, b := sample()
			p.a, p.b = max(p.a, a), max(p.b, b)
			select {
			case <-p.stopc:
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

func (p *peak) stop() (int64, int64) {
	close(p.stopc)
	<-p.done
	return p.a, p.b
}
