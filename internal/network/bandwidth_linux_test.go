package network

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestBandwidth caps a sandbox both ways and measures TCP throughput
// through the caps. The connections are opened by the sandbox to a
// listener on its gateway, on a port the firewall lets in, as a sandbox
// reaches the egress proxy on the host (the host opens no connection to a
// sandbox); both directions cross the host end like forwarded traffic.
func TestBandwidth(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.LockFirewall(t)
	runDir := t.TempDir()
	t.Cleanup(func() { _ = unix.Unmount(Dir(runDir), unix.MNT_DETACH) })

	pool, err := NewPool(netip.MustParsePrefix("10.251.0.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("bandwidth-test-%d", os.Getpid())
	ns := newNamespace(t, runDir, id)
	addrs, err := pool.Allocate(id)
	if err != nil {
		t.Fatal(err)
	}
	cfg := VethConfig{SandboxID: id, Addrs: addrs}
	if err := ns.AttachVeth(context.Background(), cfg); err != nil {
		t.Fatalf("AttachVeth: %v", err)
	}
	host := cfg.hostName()
	t.Cleanup(func() {
		if err := SetBandwidth(host, Bandwidth{}); err != nil {
			t.Errorf("removing caps: %v", err)
		}
		if err := DetachVeth(context.Background(), cfg); err != nil {
			t.Errorf("DetachVeth: %v", err)
		}
		if _, err := netlink.LinkByName(ifbName(host)); err == nil {
			t.Errorf("ifb %s still there", ifbName(host))
		}
	})
	ln, err := net.Listen("tcp4", netip.AddrPortFrom(addrs.Gateway, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	// A table a stopped server left is shared, as in TestIsolation.
	existed := tableListed(t)
	fw, err := NewFirewall(FirewallConfig{HostTCPPorts: []uint16{uint16(ln.Addr().(*net.TCPAddr).Port)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.EnsureBase(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !existed {
		t.Cleanup(func() {
			if err := fw.Delete(context.Background()); err != nil {
				t.Errorf("deleting firewall: %v", err)
			}
		})
	}

	const capBits = 10e6
	capped := Bandwidth{Down: capBits, Up: capBits}
	for range 2 { // the second call must change nothing
		if err := SetBandwidth(host, capped); err != nil {
			t.Fatalf("SetBandwidth(%s, %+v): %v", host, capped, err)
		}
	}
	checkShapers(t, host, capped)

	down := throughput(t, ns, ln, true, 500*time.Millisecond, 2500*time.Millisecond)
	up := throughput(t, ns, ln, false, 500*time.Millisecond, 2500*time.Millisecond)
	t.Logf("capped at %.0f Mbit/s: down %.2f Mbit/s, up %.2f Mbit/s", capBits/1e6, down/1e6, up/1e6)
	for _, m := range []struct {
		dir  string
		rate float64
	}{{"down", down}, {"up", up}} {
		if m.rate < 0.8*capBits || m.rate > 1.2*capBits {
			t.Errorf("%s: %.2f Mbit/s, want %.0f Mbit/s ± 20%%", m.dir, m.rate/1e6, capBits/1e6)
		}
	}

	// One direction only: the other's pieces go.
	downOnly := Bandwidth{Down: 2 * capBits}
	if err := SetBandwidth(host, downOnly); err != nil {
		t.Fatalf("SetBandwidth(%s, %+v): %v", host, downOnly, err)
	}
	checkShapers(t, host, downOnly)

	if err := SetBandwidth(host, Bandwidth{}); err != nil {
		t.Fatalf("SetBandwidth(%s, {}): %v", host, err)
	}
	checkShapers(t, host, Bandwidth{})
	down = throughput(t, ns, ln, true, 200*time.Millisecond, 500*time.Millisecond)
	up = throughput(t, ns, ln, false, 200*time.Millisecond, 500*time.Millisecond)
	t.Logf("uncapped: down %.0f Mbit/s, up %.0f Mbit/s", down/1e6, up/1e6)
	if down < 5*capBits || up < 5*capBits {
		t.Errorf("uncapped: down %.2f, up %.2f Mbit/s, want far above %.0f", down/1e6, up/1e6, capBits/1e6)
	}
}

func TestSetBandwidthErrors(t *testing.T) {
	const missing = "asb-nosuchlink"
	err := SetBandwidth(missing, Bandwidth{Down: 1e6})
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("SetBandwidth(%s) = %v, want an error naming it", missing, err)
	}
	for _, c := range []struct {
		name   string
		hostIf string
		bw     Bandwidth
	}{
		{"not a sandbox link", "lo", Bandwidth{}},
		{"name too long", "asb-0123456789ab", Bandwidth{}},
		{"below the minimum", missing, Bandwidth{Up: 100}},
	} {
		if err := SetBandwidth(c.hostIf, c.bw); err == nil {
			t.Errorf("%s: SetBandwidth(%q, %+v) succeeded", c.name, c.hostIf, c.bw)
		}
	}
}

func TestTbfSizes(t *testing.T) {
	for _, c := range []struct {
		name         string
		bits         uint64
		burst, limit uint32
	}{
		{"floor", 10e6, 64 << 10, 64<<10 + 62500},
		{"10 ms", 1e9, 1250000, 1250000 + 6250000},
		{"clamped", 1e15, 1<<32 - 1, 1<<32 - 1},
	} {
		burst, limit := tbfSizes(c.bits / 8)
		if burst != c.burst || limit != c.limit {
			t.Errorf("%s: tbfSizes(%d bit/s) = %d, %d; want %d, %d", c.name, c.bits, burst, limit, c.burst, c.limit)
		}
	}
}

// checkShapers checks that host's qdiscs, filters and ifb are exactly what
// bw calls for.
func checkShapers(t *testing.T, host string, bw Bandwidth) {
	t.Helper()
	link, err := netlink.LinkByName(host)
	if err != nil {
		t.Fatal(err)
	}
	checkTbf(t, link, bw.Down)
	ingress, err := findQdisc(link, netlink.HANDLE_INGRESS, "ingress")
	if err != nil {
		t.Fatal(err)
	}
	ifb, ifbErr := netlink.LinkByName(ifbName(host))
	if bw.Up == 0 {
		if ingress != nil {
			t.Errorf("%s: ingress qdisc with Up uncapped", host)
		}
		if ifbErr == nil {
			t.Errorf("%s: ifb %s with Up uncapped", host, ifbName(host))
		}
		return
	}
	if ingress == nil {
		t.Fatalf("%s: no ingress qdisc", host)
	}
	if ifbErr != nil {
		t.Fatalf("%s: %v", host, ifbErr)
	}
	filters, err := netlink.FilterList(link, ingressHandle)
	if err != nil {
		t.Fatal(err)
	}
	if len(filters) != 1 {
		t.Fatalf("%s: %d ingress filters, want 1", host, len(filters))
	}
	u, ok := filters[0].(*netlink.U32)
	if !ok || len(u.Actions) != 1 {
		t.Fatalf("%s: ingress filter %+v, want a u32 with one action", host, filters[0])
	}
	if m, ok := u.Actions[0].(*netlink.MirredAction); !ok || m.Ifindex != ifb.Attrs().Index {
		t.Errorf("%s: ingress action %+v, want a redirect to %s", host, u.Actions[0], ifb.Attrs().Name)
	}
	checkTbf(t, ifb, bw.Up)
	if addrs, err := netlink.AddrList(ifb, unix.AF_INET6); err != nil || len(addrs) > 0 {
		t.Errorf("%s: IPv6 addresses %v (%v), want none", ifb.Attrs().Name, addrs, err)
	}
}

// checkTbf checks that link's root qdisc is a tbf at bits/s, or not a tbf
// if bits is 0.
func checkTbf(t *testing.T, link netlink.Link, bits uint64) {
	t.Helper()
	qs, err := netlink.QdiscList(link)
	if err != nil {
		t.Fatal(err)
	}
	var tbfs []*netlink.Tbf
	for _, q := range qs {
		if tbf, ok := q.(*netlink.Tbf); ok {
			tbfs = append(tbfs, tbf)
		}
	}
	name := link.Attrs().Name
	switch {
	case bits == 0 && len(tbfs) != 0:
		t.Errorf("%s: tbf left uncapped", name)
	case bits != 0 && len(tbfs) != 1:
		t.Errorf("%s: %d tbfs, want 1", name, len(tbfs))
	case bits != 0 && tbfs[0].Rate != bits/8:
		t.Errorf("%s: tbf rate %d B/s, want %d", name, tbfs[0].Rate, bits/8)
	}
}

// throughput opens a connection from the sandbox ns to ln, on the host,
// sends on it toward the sandbox (down) or from it, and returns the rate in
// bits/s at which the receiving socket took in data during span, after a
// warm-up that lets slow start and the initial burst pass. The kernel's
// count (tcpi_bytes_received) is used rather than what the test reads, so
// that a reader descheduled on a busy machine does not show as a stall.
func throughput(t *testing.T, ns *Namespace, ln net.Listener, down bool, warm, span time.Duration) float64 {
	t.Helper()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	sbConn, err := ns.Dial(ctx, "tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer sbConn.Close()
	hostConn, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	defer hostConn.Close()
	src, dst := sbConn, hostConn
	if down {
		src, dst = dst, src
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	defer src.Close()
	defer dst.Close()
	wg.Go(func() {
		buf := make([]byte, 64<<10)
		for {
			if _, err := src.Write(buf); err != nil {
				return
			}
		}
	})
	wg.Go(func() { _, _ = io.Copy(io.Discard, dst) })

	raw, err := dst.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	received := func() (uint64, time.Time) {
		var info *unix.TCPInfo
		var ierr error
		if err := raw.Control(func(fd uintptr) {
			info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.SOL_TCP, unix.TCP_INFO)
		}); err != nil || ierr != nil {
			t.Fatalf("reading TCP_INFO: %v", errors.Join(err, ierr))
		}
		return info.Bytes_received, time.Now()
	}
	time.Sleep(warm)
	n0, t0 := received()
	time.Sleep(span)
	n1, t1 := received()
	return float64(n1-n0) * 8 / t1.Sub(t0).Seconds()
}
