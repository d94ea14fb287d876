//go:build !linux

package egress

import (
	"errors"
	"net"
	"net/netip"
)

// OriginalDst returns the destination c was sent to before a redirect. It
// needs Linux conntrack; elsewhere it returns errors.ErrUnsupported.
func OriginalDst(c net.Conn) (netip.AddrPort, error) {
	return netip.AddrPort{}, errors.ErrUnsupported
}
