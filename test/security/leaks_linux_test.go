package security

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/cgroup"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// testLeaks are the inside-out leaks a red-team run found from inside
// sandboxes (vsock is among the syscall rows, the files API's user
// permissions among its rows): host descriptors, envd's memory, the shared
// conntrack table, /dev/shm's size and host paths in mountinfo.
func testLeaks(t *testing.T, h *harness, tb *table, neighbour store.Sandbox) {
	sb := h.create("")
	envdMemory(t, h, tb, sb) // first: before envd has started anything as user
	fdLeak(t, h, tb, sb)
	mountinfoLeak(t, h, tb, sb)
	shmFill(t, h, tb, h.create(""))
	conntrackFlood(t, h, tb, h.create(`{"allowOut":["`+siteCIDR+`"]}`), neighbour)
}

// fdLeak compares the descriptors of the sandbox's processes with the
// test process's: the test holds a pipe without close-on-exec, as the
// server held the fd 251 it had inherited, and no process in the sandbox
// may hold it.
func fdLeak(t *testing.T, h *harness, tb *table, sb store.Sandbox) {
	pipe := fmt.Sprintf("pipe:[%d]", h.leakIno)
	// The control: the leak is live. A host process the test starts now
	// inherits the pipe, as init does.
	out, err := exec.Command("/bin/ls", "-l", "/proc/self/fd/").CombinedOutput()
	provoked := err == nil && strings.Contains(string(out), pipe)
	ctl := fmt.Sprintf("control: a host child of the test inherits the test's %s: %v", pipe, provoked)
	if !provoked {
		ctl = fmt.Sprintf("POSITIVE CONTROL FAILED: a host child of the test does not inherit %s (%v): %s", pipe, err, out)
	}
	for _, u := range users {
		got := h.probe(sb, u, "fdlist")
		var passed []string
		for _, f := range strings.Fields(strings.TrimPrefix(got, "ok ")) {
			if strings.HasSuffix(f, "+") {
				fd, _, _ := strings.Cut(f, "=")
				passed = append(passed, fd)
			}
		}
		tb.add(t, outcome{attack: "a host descriptor inherited by the server (" + pipe + "): in a sandbox process?", as: u,
			expected:  "only fds 0, 1, 2 pass on to what it runs (the rest are the probe's own, close-on-exec); none is the host's pipe",
			observed:  fmt.Sprintf("%s; %s", got, ctl),
			contained: provoked && strings.HasPrefix(got, "ok 0=") && slices.Equal(passed, []string{"0", "1", "2"}) && !strings.Contains(got, pipe)})
	}

	// From the host, every process of the sandbox: init, envd and what
	// envd runs. The control: the test's own descriptors show the pipe.
	own, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", h.leak[0]))
	name, err := h.s.Cgroup(sb)
	if err != nil {
		t.Fatal(err)
	}
	cg, err := cgroup.Load(name)
	if err != nil {
		t.Fatal(err)
	}
	pids, err := cg.Procs()
	if err != nil {
		t.Fatal(err)
	}
	var holders []string
	nfds := 0
	for _, pid := range pids {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			nfds++
			if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); l == pipe {
				holders = append(holders, fmt.Sprintf("pid %d fd %s", pid, fd.Name()))
			}
		}
	}
	tb.add(t, outcome{attack: "the same pipe, seen from the host: in any process of the sandbox's cgroup?", as: "host",
		expected:  "no process of the sandbox (init, envd, commands) holds it; the test itself does (the control)",
		observed:  fmt.Sprintf("holders %v among %d descriptors of %d processes; the test's fd %d is %s", holders, nfds, len(pids), h.leak[0], own),
		contained: own == pipe && len(pids) >= 2 && nfds > 0 && len(holders) == 0})
}

// envdMemory opens envd's /proc files as sandbox root and user. The
// controls, in the same probe run: the same opens on a child of the probe
// work, and what the probe runs is dumpable (execve resets the flag). Root
// goes first, in a sandbox where envd has started nothing as another user
// yet: starting a command as user (a setuid in a child that shares envd's
// memory until its exec) happens to make envd non-dumpable too, which would
// hide the leak.
func envdMemory(t *testing.T, h *harness, tb *table, sb store.Sandbox) {
	for _, u := range []string{"root", "user"} {
		got, obs, ok := h.probed(sb, u, []control{
			{args: []string{"procmem", "child"}, want: "mem=ok environ=ok status=ok", ok: func(s string) bool { return strings.HasPrefix(s, "mem=ok environ=ok status=ok ") }},
			{args: []string{"dumpable"}, want: "ok 1", ok: is("ok 1")},
		}, "procmem", "envd")
		tb.add(t, outcome{attack: "open /proc/<envd>/mem (read-write) and environ: envd's code and token", as: u,
			expected:  "mem=EACCES environ=EACCES (envd is not dumpable); status (ps, metrics) readable",
			observed:  obs,
			contained: ok && strings.HasPrefix(got, "mem=EACCES environ=EACCES status=ok ")})
	}
	rss := h.envdRSS(sb)
	tb.add(t, outcome{attack: "envd's /proc/<pid>/status from the host (the sandbox's metrics)", as: "host",
		expected: "readable: VmRSS > 0", observed: fmt.Sprintf("envd VmRSS %d kB", rss>>10), contained: rss > 0})
}

// mountinfoLeak reads the sandbox's mountinfo and the statfs of its mounts:
// no host path of the test (its data, run and temp directories, the
// checkout) and no host disk's size. The controls: the same check finds
// the run directory in the host's own mountinfo, and the sandbox's view
// is real (its root is its own disk, of about diskMB).
func mountinfoLeak(t *testing.T, h *harness, tb *table, sb store.Sandbox) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	checkout := filepath.Dir(filepath.Dir(wd)) // test/security → the module's root
	testDir := filepath.Dir(h.s.StateDir)
	hostPaths := []string{h.s.StateDir, h.s.RunDir, testDir, checkout}
	named := func(mountinfo string) []string {
		var found []string
		for _, p := range hostPaths {
			if strings.Contains(mountinfo, p) {
				found = append(found, p)
			}
		}
		return found
	}
	hostSizes := map[uint64]string{}
	for _, p := range []string{h.s.StateDir, checkout, os.TempDir(), "/"} {
		var st unix.Statfs_t
		if err := unix.Statfs(p, &st); err == nil && st.Blocks > 0 {
			hostSizes[st.Blocks*uint64(st.Bsize)] = p
		}
	}
	hostInfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	hostFound := named(string(hostInfo))
	controlsOK := slices.Contains(hostFound, h.s.RunDir) && len(hostSizes) > 0
	for _, u := range users {
		got := h.probe(sb, u, "mounts")
		var v mountView
		if err := json.Unmarshal([]byte(got), &v); err != nil {
			tb.add(t, outcome{attack: "host paths and disk sizes in /proc/self/mountinfo and statfs", as: u,
				expected: "none", observed: "the probe's answer: " + got, contained: false})
			continue
		}
		var sized []string
		for mp, size := range v.Statfs {
			if p, ok := hostSizes[size]; ok {
				sized = append(sized, fmt.Sprintf("%s (%d bytes, as %s)", mp, size, p))
			}
		}
		found := named(v.Mountinfo)
		root := v.Statfs["/"]
		real := strings.Contains(v.Mountinfo, " /usr/bin/envd ") && root >= diskMB<<20/2 && root <= diskMB<<20
		tb.add(t, outcome{attack: "host paths and disk sizes in /proc/self/mountinfo and statfs", as: u,
			expected: "no host path (data, run, temp dirs, checkout) and no host disk's size; the same check finds the run dir in the host's mountinfo",
			observed: fmt.Sprintf("host paths %v; host-sized mounts %v; %d mounts; / is %d MB; control: the host's mountinfo names %v, host sizes %v",
				found, sized, len(v.Statfs), root>>20, hostFound, slices.Collect(maps.Values(hostSizes))),
			contained: controlsOK && real && len(found) == 0 && len(sized) == 0})
	}
}

// shmFill fills /dev/shm: it must stop at ENOSPC within the sandbox's
// memory, with envd alive and no OOM kill.
func shmFill(t *testing.T, h *harness, tb *table, sb store.Sandbox) {
	oomFile := "memory.oom_control"
	if mode, _ := cgroup.Detect(); mode == cgroup.V2 {
		oomFile = "memory.events"
	}
	got := h.probe(sb, "user", "fill", "/dev/shm/fill")
	var mb int
	fmt.Sscanf(got, "ok wrote %d MB", &mb)
	code, herr := h.health(sb)
	rec, _ := h.m.Get(context.Background(), sb.ID)
	kills := oomKillCount(h.cgroupFile(sb, "memory", oomFile))
	freed := h.probe(sb, "user", "remove", "/dev/shm/fill")
	tb.add(t, outcome{attack: fmt.Sprintf("fill /dev/shm (in a %d MB sandbox)", memoryMB), as: "user",
		expected: fmt.Sprintf("writes %d MB (half the memory: the control that it filled), then ENOSPC; no OOM kill; envd answers", memoryMB/2),
		observed: fmt.Sprintf("%s; oom_kill %s; /health %d %v; state %s; removing it: %s", got, kills, code, herr, rec.State, freed),
		contained: mb >= memoryMB/2-1 && mb <= memoryMB/2 && strings.HasSuffix(got, "ENOSPC") && kills == "0" &&
			herr == nil && code/100 == 2 && rec.State == store.StateRunning})
}

// conntrackFlood opens far more UDP connections than the cap from one
// sandbox: DNS queries (redirected to the gateway, the input hook) and
// datagrams to many ports of the test Internet (forwarded).
func conntrackFlood(t *testing.T, h *harness, tb *table, flooder, neighbour store.Sandbox) {
	addr := h.link(flooder).Address
	gw := h.link(flooder).Gateway
	const n = 2 * connCap
	dnsOK := control{args: []string{"dns", "site.test"}, want: "ok " + siteIP.String(), ok: is("ok " + siteIP.String())}
	_, before, okBefore := h.probed(flooder, "root", []control{dnsOK}, "stat", "/")
	flood := h.probe(flooder, "root", "udpflood", strconv.Itoa(n/2), net.JoinHostPort(gw.String(), "53"), net.JoinHostPort(siteIP.String(), "20000+"))
	count := conntrackFrom(t, addr)
	capped := h.probe(flooder, "root", "dns", "site.test")
	_, nbObs, nbOK := h.probed(neighbour, "root", []control{dnsOK}, "stat", "/")

	// Its entries released (what their expiry does, 30 s later), the
	// flooder connects again.
	f := &netlink.ConntrackFilter{}
	if err := f.AddIP(netlink.ConntrackOrigSrcIP, net.IP(addr.AsSlice())); err != nil {
		t.Fatal(err)
	}
	if _, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, f); err != nil {
		t.Fatal(err)
	}
	after := h.probe(flooder, "root", "dns", "site.test")
	tb.add(t, outcome{attack: fmt.Sprintf("conntrack flood: %d new UDP connections (DNS to the gateway, datagrams to %d ports)", n, n/2), as: "root",
		expected: fmt.Sprintf("its conntrack entries stop at the cap (%d); its next DNS query times out; the neighbour resolves; it resolves again once its entries are gone", connCap),
		observed: fmt.Sprintf("%s; entries %d; then dns: %s; neighbour: %s; after release: %s; before: %s", flood, count, capped, nbObs, after, before),
		contained: okBefore && nbOK && strings.HasPrefix(flood, "ok sent") && count <= connCap && count >= connCap-4 &&
			capped == "timeout" && after == dnsOK.want})
}

// conntrackFrom counts the host's conntrack entries from src.
func conntrackFrom(t *testing.T, src netip.Addr) int {
	t.Helper()
	flows, err := netlink.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
	if err != nil {
		t.Fatalf("listing conntrack: %v", err)
	}
	n := 0
	for _, f := range flows {
		if a, ok := netip.AddrFromSlice(f.Forward.SrcIP); ok && a.Unmap() == src {
			n++
		}
	}
	return n
}
