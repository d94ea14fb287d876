package jail

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
)

// ddRE matches dd's summary: "25165824 bytes (25 MB, 24 MiB) copied, 3.00123 s, 8.4 MB/s".
var ddRE = regexp.MustCompile(`(?m)^(\d+) bytes .* copied, ([0-9.]+) s`)

// dd runs dd with args in inst as root and returns the bytes per second
// and the operations per second (of size bs bytes) that it reports.
func dd(t *testing.T, inst isolation.Instance, bs int, args string) (bps, iops float64) {
	t.Helper()
	r := run(t, inst, "root", "/bin/sh", "-c", fmt.Sprintf("dd bs=%d %s 2>&1", bs, args))
	m := ddRE.FindStringSubmatch(r.stdout)
	if r.exit != 0 || m == nil {
		t.Fatalf("dd %s exited %d: %s", args, r.exit, r.stdout)
	}
	n, _ := strconv.ParseFloat(m[1], 64)
	secs, _ := strconv.ParseFloat(m[2], 64)
	return n / secs, n / float64(bs) / secs
}

// within checks that got is within ±20 % of want.
func within(t *testing.T, what string, got, want float64) {
	t.Helper()
	t.Logf("%s: %.0f, cap %.0f (%.2f×)", what, got, want, got/want)
	if got < 0.8*want || got > 1.2*want {
		t.Errorf("%s = %.0f, want the cap %.0f ±20%%", what, got, want)
	}
}

// TestDiskIOQuota measures direct I/O on the sandbox's disk (/home/user is
// on its overlay's upper layer, the loop-mounted image) against its
// bytes/s and IOPS caps, each way. The positive control is the same
// writer in a sandbox without a quota, which must run well above the
// caps: otherwise the disk, not the quota, would be what was measured.
func TestDiskIOQuota(t *testing.T) {
	b := newTestBackend(t, nil)
	const rate = 8 << 20 // bytes/s
	const ops = 200      // IOPS

	free := startSandbox(t, b, testSpec(t, isolation.Resources{}))
	ctlBps, ctlIOPS := dd(t, free, 1<<20, "if=/dev/zero of=/home/user/f count=24 oflag=direct")
	_, ctl4k := dd(t, free, 4096, "if=/dev/zero of=/home/user/g count=2000 oflag=direct")
	t.Logf("control, no quota: %.0f bytes/s (%.0f IOPS of 1 MiB), %.0f IOPS of 4 KiB", ctlBps, ctlIOPS, ctl4k)
	if ctlBps < 3*rate || ctl4k < 3*ops {
		t.Fatalf("without a quota direct writes run at %.0f bytes/s and %.0f IOPS: too slow to tell a cap of %d bytes/s or %d IOPS from the disk", ctlBps, ctl4k, rate, ops)
	}

	t.Run("bytes per second", func(t *testing.T) {
		inst := startSandbox(t, b, testSpec(t, isolation.Resources{DiskIO: isolation.DiskIO{
			ReadBytesPerSec: rate, WriteBytesPerSec: rate,
		}}))
		// 24 MiB at 8 MiB/s: 3 s each way.
		w, _ := dd(t, inst, 1<<20, "if=/dev/zero of=/home/user/f count=24 oflag=direct")
		within(t, "direct write, bytes/s", w, rate)
		r, _ := dd(t, inst, 1<<20, "if=/home/user/f of=/dev/null iflag=direct")
		within(t, "direct read, bytes/s", r, rate)
	})
	t.Run("IOPS", func(t *testing.T) {
		inst := startSandbox(t, b, testSpec(t, isolation.Resources{DiskIO: isolation.DiskIO{
			ReadIOPS: ops, WriteIOPS: ops,
		}}))
		// 600 operations of 4 KiB at 200/s: 3 s each way. The file is
		// written first without O_DIRECT (an allocating direct write costs
		// the filesystem metadata I/O too), and dropped from the cache.
		sh(t, inst, "dd if=/dev/zero of=/home/user/f bs=4096 count=600 conv=fsync 2>/dev/null")
		_, w := dd(t, inst, 4096, "if=/dev/zero of=/home/user/f count=600 oflag=direct conv=notrunc")
		within(t, "direct write, IOPS", w, ops)
		_, r := dd(t, inst, 4096, "if=/home/user/f of=/dev/null iflag=direct")
		within(t, "direct read, IOPS", r, ops)
	})
}

// TestResourcesInside checks that a sandbox sees its CPU count and memory
// limit: nproc counts the cpu set, and the cgroup mounted read-only at
// /sys/fs/cgroup (rooted at the sandbox's group) shows the memory limit,
// which envd's /metrics reports too.
func TestResourcesInside(t *testing.T) {
	b := newTestBackend(t, nil)
	const memMB = 300
	inst := startSandbox(t, b, testSpec(t, isolation.Resources{CPUCount: 1, MemoryMB: memMB}))
	if got := strings.TrimSpace(sh(t, inst, "nproc")); got != "1" {
		t.Errorf("nproc in a sandbox of 1 CPU = %q", got)
	}
	limit := strings.TrimSpace(sh(t, inst, "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"))
	if limit != strconv.Itoa(memMB<<20) {
		t.Errorf("memory limit inside = %q, want %d", limit, memMB<<20)
	}
	if r := run(t, inst, "root", "/bin/sh", "-c", "echo 1 > /sys/fs/cgroup/cgroup.procs || echo 1 > /sys/fs/cgroup/memory/cgroup.procs"); r.exit == 0 {
		t.Errorf("writing the cgroup file system inside succeeded: it must be read-only")
	}
	resp, err := envdHTTPClient(inst).Get("http://envd/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct {
		CPUCount int    `json:"cpu_count"`
		MemTotal uint64 `json:"mem_total"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	if m.CPUCount != 1 || m.MemTotal != memMB<<20 {
		t.Errorf("envd /metrics: cpu_count %d, mem_total %d; want 1 and %d", m.CPUCount, m.MemTotal, memMB<<20)
	}
}
