package network

import (
	"context"
	"encoding/binary"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
	"github.com/google/go-cmp/cmp"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

func TestParseIP(t *testing.T) {
	v4a, v4b := netip.MustParseAddr("10.200.0.2"), netip.MustParseAddr("198.18.0.2")
	v6a, v6b := netip.MustParseAddr("fe80::2"), netip.MustParseAddr("ff02::1")
	tcp := binary.BigEndian.AppendUint16([]byte{0x9c, 0x40}, 443) // source port 40000, then the destination port
	udp := binary.BigEndian.AppendUint16([]byte{0x9c, 0x40}, 53)
	type want struct {
		Proto    string
		Src, Dst netip.Addr
		DstPort  uint16
	}
	for _, tc := range []struct {
		name string
		pkt  []byte
		want want
	}{
		{"ipv4 tcp", ipv4Packet(v4a, v4b, unix.IPPROTO_TCP, 0, 0, tcp), want{"tcp", v4a, v4b, 443}},
		{"ipv4 udp with options", ipv4Packet(v4a, v4b, unix.IPPROTO_UDP, 8, 0, udp), want{"udp", v4a, v4b, 53}},
		{"ipv4 icmp", ipv4Packet(v4a, v4b, unix.IPPROTO_ICMP, 0, 0, []byte{8, 0, 0, 0}), want{"icmp", v4a, v4b, 0}},
		{"ipv4 later fragment", ipv4Packet(v4a, v4b, unix.IPPROTO_UDP, 0, 185, udp), want{"udp", v4a, v4b, 0}},
		{"ipv4 other protocol", ipv4Packet(v4a, v4b, 47, 0, 0, nil), want{"47", v4a, v4b, 0}},
		{"ipv4 cut before the ports", ipv4Packet(v4a, v4b, unix.IPPROTO_TCP, 0, 0, tcp[:2]), want{"tcp", v4a, v4b, 0}},
		{"ipv4 cut in the header", ipv4Packet(v4a, v4b, unix.IPPROTO_TCP, 0, 0, nil)[:16], want{}},
		{"ipv6 udp", ipv6Packet(v6a, v6b, unix.IPPROTO_UDP, udp), want{"udp", v6a, v6b, 53}},
		{"ipv6 icmpv6", ipv6Packet(v6a, v6b, unix.IPPROTO_ICMPV6, []byte{128, 0, 0, 0}), want{"icmpv6", v6a, v6b, 0}},
		{"ipv6 hop-by-hop then tcp", ipv6Packet(v6a, v6b, unix.IPPROTO_HOPOPTS,
			append([]byte{unix.IPPROTO_TCP, 0, 1, 4, 0, 0, 0, 0}, tcp...)), want{"tcp", v6a, v6b, 443}},
		{"ipv6 first fragment", ipv6Packet(v6a, v6b, unix.IPPROTO_FRAGMENT,
			append([]byte{unix.IPPROTO_UDP, 0, 0, 1, 0, 0, 0, 7}, udp...)), want{"udp", v6a, v6b, 53}},
		{"ipv6 later fragment", ipv6Packet(v6a, v6b, unix.IPPROTO_FRAGMENT,
			append([]byte{unix.IPPROTO_UDP, 0, 0x05, 0xa8, 0, 0, 0, 7}, udp...)), want{"udp", v6a, v6b, 0}},
		{"ipv6 cut in an extension header", ipv6Packet(v6a, v6b, unix.IPPROTO_DSTOPTS, []byte{unix.IPPROTO_TCP, 1, 0}),
			want{"60", v6a, v6b, 0}},
		{"ipv6 cut in the header", ipv6Packet(v6a, v6b, unix.IPPROTO_UDP, nil)[:39], want{}},
		{"not ip", []byte{0x50, 1, 2, 3}, want{}},
		{"empty", nil, want{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got want
			got.Proto, got.Src, got.Dst, got.DstPort = parseIP(tc.pkt)
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("parseIP (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseDrop(t *testing.T) {
	now := time.Unix(1700000000, 0)
	pkt := ipv4Packet(netip.MustParseAddr("10.200.0.2"), netip.MustParseAddr("169.254.169.254"), unix.IPPROTO_TCP, 0, 0,
		[]byte{0x9c, 0x40, 0, 80})
	attrs := func(ts bool) []byte {
		ae := netlink.NewAttributeEncoder()
		ae.ByteOrder = binary.BigEndian
		ae.Bytes(1, []byte{0x08, 0x00, 1, 0}) // NFULA_PACKET_HDR: ignored
		if ts {
			ae.Bytes(nfulaTimestamp, binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, 1700000123), 456))
		}
		ae.Uint32(nfulaIfindexIndev, 42)
		ae.Bytes(nfulaPayload, pkt)
		ae.String(nfulaPrefix, DropBlocked)
		b, err := ae.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return append(nfgenmsg(unix.AF_INET, 4242), b...)
	}
	packet := netlink.HeaderType(unix.NFNL_SUBSYS_ULOG<<8 | nfulnlMsgPacket)
	want := Drop{Time: now, Reason: DropBlocked, Proto: "tcp",
		Src: netip.MustParseAddr("10.200.0.2"), Dst: netip.MustParseAddr("169.254.169.254"), DstPort: 80}
	withTime := want
	withTime.Time = time.Unix(1700000123, 456000)
	for _, tc := range []struct {
		name    string
		m       netlink.Message
		want    Drop
		ifindex uint32
		ok      bool
	}{
		{"packet", netlink.Message{Header: netlink.Header{Type: packet}, Data: attrs(false)}, want, 42, true},
		{"kernel timestamp", netlink.Message{Header: netlink.Header{Type: packet}, Data: attrs(true)}, withTime, 42, true},
		{"end of batch", netlink.Message{Header: netlink.Header{Type: netlink.Done}, Data: make([]byte, 4)}, Drop{}, 0, false},
		{"config", netlink.Message{Header: netlink.Header{Type: packet + 1}, Data: attrs(false)}, Drop{}, 0, false},
		{"short", netlink.Message{Header: netlink.Header{Type: packet}, Data: []byte{2, 0}}, Drop{}, 0, false},
		{"bad attributes", netlink.Message{Header: netlink.Header{Type: packet}, Data: append(nfgenmsg(2, 1), 9, 0, 9, 0)}, Drop{}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ifindex, ok := parseDrop(tc.m, now)
			if ok != tc.ok || ifindex != tc.ifindex {
				t.Fatalf("parseDrop: ifindex %d, ok %v; want %d, %v", ifindex, ok, tc.ifindex, tc.ok)
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("parseDrop (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDropLogGroup checks that a group has one reader and that Read ends
// with its ctx; TestIsolation reads real drops.
func TestDropLogGroup(t *testing.T) {
	testenv.RequireRoot(t)
	l, group := openDropLog(t, 4242+7919)
	if l2, err := OpenDropLog(group); err == nil {
		l2.Close()
		t.Errorf("a second OpenDropLog(%d) succeeded", group)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Read(ctx, func(Drop) {}) }()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Read after cancel: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Read did not return after its ctx ended")
	}
	// A cancelled Read leaves the log readable.
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := l.Read(ctx, func(Drop) {}); err != nil {
		t.Errorf("Read again: %v", err)
	}
	// Closing the socket unbinds the group.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, err := OpenDropLog(group)
	if err != nil {
		t.Fatalf("OpenDropLog after Close: %v", err)
	}
	l2.Close()
	if _, err := OpenDropLog(0); err == nil {
		t.Error("OpenDropLog(0) succeeded")
	}
}

// openDropLog opens a drop log on the first free group from base (offset
// by the pid, so concurrent test binaries do not meet) and closes it when
// the test ends.
func openDropLog(t *testing.T, base uint16) (*DropLog, uint16) {
	t.Helper()
	base += uint16(os.Getpid()%512) * 8
	var err error
	for g := base; g < base+8; g++ {
		var l *DropLog
		if l, err = OpenDropLog(g); err == nil {
			t.Cleanup(func() { l.Close() })
			return l, g
		}
	}
	t.Fatalf("no free NFLOG group from %d: %v", base, err)
	return nil, 0
}

// ipv4Packet builds an IPv4 packet with optLen bytes of options (a multiple
// of 4) and a fragment offset (in 8-byte units); checksums are left 0.
func ipv4Packet(src, dst netip.Addr, proto uint8, optLen int, fragOff uint16, payload []byte) []byte {
	ihl := 20 + optLen
	b := make([]byte, ihl, ihl+len(payload))
	b[0] = 0x40 | byte(ihl/4)
	binary.BigEndian.PutUint16(b[2:], uint16(ihl+len(payload)))
	binary.BigEndian.PutUint16(b[6:], fragOff)
	b[8], b[9] = 64, proto
	s, d := src.As4(), dst.As4()
	copy(b[12:], s[:])
	copy(b[16:], d[:])
	for i := 20; i < ihl; i++ {
		b[i] = 1 // NOP
	}
	return append(b, payload...)
}

// ipv6Packet builds an IPv6 packet with next as its Next Header.
func ipv6Packet(src, dst netip.Addr, next uint8, payload []byte) []byte {
	b := make([]byte, 40, 40+len(payload))
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(len(payload)))
	b[6], b[7] = next, 64
	s, d := src.As16(), dst.As16()
	copy(b[8:], s[:])
	copy(b[24:], d[:])
	return append(b, payload...)
}

// ipv6UDP builds an IPv6 UDP datagram with a correct checksum.
func ipv6UDP(src, dst netip.Addr, sport, dport uint16, data []byte) []byte {
	udp := make([]byte, 8, 8+len(data))
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], dport)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(data)))
	udp = append(udp, data...)
	s, d := src.As16(), dst.As16()
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	add(s[:])
	add(d[:])
	sum += uint32(len(udp)) + unix.IPPROTO_UDP
	add(udp)
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	c := ^uint16(sum)
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(udp[6:], c)
	return ipv6Packet(src, dst, unix.IPPROTO_UDP, udp)
}
