package recovery

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/client"
	"github.com/agent-sandbox/agent-sandbox/internal/cgroup"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv/servertest"
)

// addressPool is the test servers' own, away from the default pool (where
// a stopped server's sandboxes may still run) and the other tests' pools.
var addressPool = netip.MustParsePrefix("10.244.0.0/24")

// serverProc is a serve process of servertest with this package's
// requests on top.
type serverProc struct {
	*servertest.Server
	t *testing.T
}

// newServer prepares a server on backend, on this package's address pool
// and with no warm pool; the caller starts it.
func newServer(t *testing.T, backend string) *serverProc {
	return &serverProc{Server: servertest.New(t, "--backend", backend, "--address-pool", addressPool.String(), "--warm-pool", "none"), t: t}
}

// ended returns why sandbox id ended, as GET /sandboxes/{id} says: 404,
// "… (it ended at <time>: <reason>)". It waits up to within for a sandbox
// that still runs to end.
func (s *serverProc) ended(id string, within time.Duration) (string, error) {
	t0 := time.Now()
	deadline := t0.Add(within)
	for {
		_, err := s.Client().GetSandbox(s.t.Context(), id)
		if err == nil && time.Now().Before(deadline) {
			time.Sleep(250 * time.Millisecond)
			continue
		}
		if err == nil {
			return "", fmt.Errorf("GET /sandboxes/%s: still running after %v", id, within)
		}
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound {
			return "", fmt.Errorf("GET /sandboxes/%s: %w, want a 404 saying why it ended", id, err)
		}
		m := endedMessage.FindStringSubmatch(apiErr.Message)
		if m == nil {
			return "", fmt.Errorf("GET /sandboxes/%s: 404 %q says no end", id, apiErr.Message)
		}
		s.t.Logf("GET /sandboxes/%s, after %v: %s", id, time.Since(t0).Round(time.Millisecond), apiErr)
		return m[1], nil
	}
}

var endedMessage = regexp.MustCompile(`\(it ended at \S+: (.*)\)$`)

// metric is one sample of GET /sandboxes/{id}/metrics.
type metric struct {
	Timestamp  time.Time `json:"timestamp"`
	CPUCount   int       `json:"cpuCount"`
	CPUUsedPct float64   `json:"cpuUsedPct"`
	MemUsed    uint64    `json:"memUsed"`
	MemTotal   uint64    `json:"memTotal"`
	DiskUsed   uint64    `json:"diskUsed"`
	DiskTotal  uint64    `json:"diskTotal"`
}

// checkMetrics keeps sb's CPUs busy for a while and checks that GET
// /sandboxes/{id}/metrics then has a sample of that time whose numbers
// fit: the sandbox's CPUs and memory, CPU used (the busy loop is the
// control that it is measured), memory used within the limit of its host
// cgroup (the jail's, or QEMU's), disk used within its disk.
func (s *serverProc) checkMetrics(be backend, sb *client.Sandbox) {
	t := s.t
	t.Helper()
	info, err := s.Client().GetSandbox(t.Context(), sb.ID)
	if err != nil {
		t.Fatalf("GET /sandboxes/%s: %v", sb.ID, err)
	}
	busy := time.Now()
	run(t, sb, "for i in $(seq "+strconv.Itoa(info.CPUCount)+"); do setsid timeout 8 sh -c 'while :; do :; done' </dev/null >/dev/null 2>&1 & done")
	var m metric
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
		var ms []metric
		s.api(http.MethodGet, "/sandboxes/"+sb.ID+"/metrics", "", http.StatusOK, &ms)
		if i := slices.IndexFunc(ms, func(m metric) bool { return m.Timestamp.After(busy.Add(2 * time.Second)) }); i >= 0 {
			m = ms[i]
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("sandbox %s: no metrics sample in the 30 s after %s: %+v", sb.ID, busy.Format(time.RFC3339), ms)
			return
		}
	}
	t.Logf("sandbox %s, busy since %s: metrics sample %+v", sb.ID, busy.Format(time.TimeOnly), m)
	cg, err := cgroup.Load(be.cgroup(sb.ID))
	if err != nil {
		t.Fatalf("sandbox %s: %v", sb.ID, err)
	}
	cs, err := cg.Stats()
	if err != nil {
		t.Fatalf("sandbox %s: cgroup %s: %v", sb.ID, be.cgroup(sb.ID), err)
	}
	mb := uint64(1 << 20)
	for _, c := range []struct {
		what string
		ok   bool
	}{
		{fmt.Sprintf("cpuCount %d, the sandbox's %d", m.CPUCount, info.CPUCount), m.CPUCount == info.CPUCount},
		{fmt.Sprintf("cpuUsedPct %.1f of a busy sandbox, in (0, 100]", m.CPUUsedPct), m.CPUUsedPct > 0 && m.CPUUsedPct <= 105},
		{fmt.Sprintf("memTotal %d, the sandbox's %d MiB", m.MemTotal, info.MemoryMB), m.MemTotal == uint64(info.MemoryMB)*mb},
		{fmt.Sprintf("memUsed %d, within the limit %d of cgroup %s", m.MemUsed, cs.MemoryLimit, be.cgroup(sb.ID)), m.MemUsed > 0 && m.MemUsed <= cs.MemoryLimit},
		{fmt.Sprintf("diskUsed %d of diskTotal %d, within the sandbox's %d MiB", m.DiskUsed, m.DiskTotal, info.DiskSizeMB),
			m.DiskUsed > 0 && m.DiskUsed <= m.DiskTotal && m.DiskTotal > uint64(info.DiskSizeMB)*mb/2 && m.DiskTotal <= uint64(info.DiskSizeMB)*mb},
	} {
		if !c.ok {
			t.Errorf("sandbox %s: metrics: %s", sb.ID, c.what)
		}
	}
}

// run runs a shell command as root in sb and returns its output; it fails
// the test unless the command exits 0.
func run(t *testing.T, sb *client.Sandbox, cmd string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out, errOut strings.Builder
	code, err := sb.Run(ctx, cmd, client.RunOptions{User: "root", Stdout: &out, Stderr: &errOut})
	if err != nil || code != 0 {
		t.Fatalf("sandbox %s: %q: exit %d, %v: %s%s", sb.ID, cmd, code, err, out.String(), errOut.String())
	}
	return out.String()
}

// procStartTime returns field 22 of /proc/<pid>/stat inside sb: with the
// pid, it names one process.
func procStartTime(t *testing.T, sb *client.Sandbox, pid string) string {
	t.Helper()
	stat := run(t, sb, "cat /proc/"+pid+"/stat")
	f := strings.Fields(stat[strings.LastIndexByte(stat, ')')+1:])
	if len(f) < 20 {
		t.Fatalf("sandbox %s: /proc/%s/stat: %q", sb.ID, pid, stat)
	}
	return f[19]
}

// listed returns the IDs of the running sandboxes tagged tag, sorted.
func listed(t *testing.T, c *client.Client, tag string) []string {
	t.Helper()
	infos, _, err := c.ListSandboxes(t.Context(), client.ListOptions{Metadata: map[string]string{"recoveryTest": tag}})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, in := range infos {
		if in.State != client.StateRunning {
			t.Errorf("sandbox %s is %s, want running", in.ID, in.State)
		}
		out = append(out, in.ID)
	}
	slices.Sort(out)
	return out
}
