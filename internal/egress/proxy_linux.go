package egress

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// OriginalDst returns the destination c was sent to before an nftables
// redirect or DNAT to us, from conntrack (SO_ORIGINAL_DST). c must be a
// *net.TCPConn accepted on an IPv4 socket, i.e. from a listener bound to
// an IPv4 address; the redirect is IPv4 only.
func OriginalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("reading original destination: %T is not a TCP connection", c)
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("reading original destination: %w", err)
	}
	// The kernel writes a struct sockaddr_in. IPv6Mreq is the smallest
	// struct x/sys/unix reads with getsockopt that holds one, which keeps
	// unsafe out of this package.
	var sa *unix.IPv6Mreq
	var serr error
	err = raw.Control(func(fd uintptr) {
		sa, serr = unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
	})
	if err = errors.Join(err, serr); err != nil {
		return netip.AddrPort{}, fmt.Errorf("reading original destination: %w", err)
	}
	b := sa.Multiaddr[:]
	if family := binary.NativeEndian.Uint16(b[0:2]); family != unix.AF_INET {
		return netip.AddrPort{}, fmt.Errorf("reading original destination: address family %d, want AF_INET", family)
	}
	port := binary.BigEndian.Uint16(b[2:4])
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port), nil
}
