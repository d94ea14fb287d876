package security

import (
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// spoofUDP sends one UDP datagram with source address src to dst over a
// raw IP socket (CAP_NET_RAW, which root in a sandbox keeps).
func spoofUDP(src, dst, payload string) (string, error) {
	s, err := netip.ParseAddr(src)
	if err != nil {
		return "", err
	}
	d, err := netip.ParseAddrPort(dst)
	if err != nil {
		return "", err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	udp := make([]byte, 8+len(payload))
	binary.BigEndian.PutUint16(udp[0:], 40000)
	binary.BigEndian.PutUint16(udp[2:], d.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	copy(udp[8:], payload) // checksum 0: none, as IPv4 allows
	ip := make([]byte, 20, 20+len(udp))
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(udp)))
	ip[8] = 64
	ip[9] = unix.IPPROTO_UDP
	sa, da := s.As4(), d.Addr().As4()
	copy(ip[12:], sa[:])
	copy(ip[16:], da[:])
	binary.BigEndian.PutUint16(ip[10:], checksum(ip))
	pkt := append(ip, udp...)
	for range 3 {
		if err := unix.Sendto(fd, pkt, 0, &unix.SockaddrInet4{Addr: da}); err != nil {
			return "", err
		}
	}
	return "ok sent 3 forged datagrams", nil
}

// arpSpoof broadcasts gratuitous ARP replies and requests on eth0 that
// claim ip for eth0's MAC address.
func arpSpoof(ip string) (string, error) {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return "", err
	}
	ifc, err := net.InterfaceByName("eth0")
	if err != nil {
		return "", err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ARP)))
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	pa := a.As4()
	for _, op := range []uint16{2, 1, 2} { // reply, request, reply
		f := make([]byte, 0, 42)
		f = append(f, bcast...)
		f = append(f, ifc.HardwareAddr...)
		f = binary.BigEndian.AppendUint16(f, unix.ETH_P_ARP)
		f = binary.BigEndian.AppendUint16(f, 1)      // Ethernet
		f = binary.BigEndian.AppendUint16(f, 0x0800) // IPv4
		f = append(f, 6, 4)
		f = binary.BigEndian.AppendUint16(f, op)
		f = append(f, ifc.HardwareAddr...)
		f = append(f, pa[:]...)
		f = append(f, bcast...)
		f = append(f, pa[:]...)
		sll := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: ifc.Index, Halen: 6}
		copy(sll.Addr[:], bcast)
		if err := unix.Sendto(fd, f, 0, sll); err != nil {
			return "", err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "ok sent mac=" + ifc.HardwareAddr.String(), nil
}

// ndpSpoof sends unsolicited neighbour advertisements (override set) on
// eth0 claiming target for eth0's MAC address, to all nodes.
func ndpSpoof(target string) (string, error) {
	t, err := netip.ParseAddr(target)
	if err != nil {
		return "", err
	}
	ifc, err := net.InterfaceByName("eth0")
	if err != nil {
		return "", err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_IPV6)))
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	mac := ifc.HardwareAddr
	src := netip.AddrFrom16([16]byte{0xfe, 0x80, 8: mac[0] ^ 2, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]})
	dst := netip.MustParseAddr("ff02::1")
	icmp := []byte{136, 0, 0, 0, 0x20, 0, 0, 0} // NA, override
	ta := t.As16()
	icmp = append(icmp, ta[:]...)
	icmp = append(icmp, 2, 1) // target link-layer address option
	icmp = append(icmp, mac...)
	binary.BigEndian.PutUint16(icmp[2:], icmp6Checksum(src, dst, icmp))
	f := []byte{0x33, 0x33, 0, 0, 0, 1}
	f = append(f, mac...)
	f = binary.BigEndian.AppendUint16(f, unix.ETH_P_IPV6)
	f = append(f, 0x60, 0, 0, 0)
	f = binary.BigEndian.AppendUint16(f, uint16(len(icmp)))
	f = append(f, unix.IPPROTO_ICMPV6, 255)
	sa, da := src.As16(), dst.As16()
	f = append(f, sa[:]...)
	f = append(f, da[:]...)
	f = append(f, icmp...)
	sll := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IPV6), Ifindex: ifc.Index, Halen: 6}
	copy(sll.Addr[:], f[:6])
	for range 3 {
		if err := unix.Sendto(fd, f, 0, sll); err != nil {
			return "", err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "ok sent mac=" + mac.String(), nil
}

// ipv6 reports the sandbox's IPv6 addresses besides loopback's and tries
// the host's port over IPv6: ::1 and the link-local all-routers address.
func ipv6(port string) (string, error) {
	var v6 []string
	ifs, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() == nil && !n.IP.IsLoopback() {
				v6 = append(v6, ifc.Name+":"+n.IP.String())
			}
		}
	}
	var res []string
	res = append(res, "ok addrs=["+strings.Join(v6, " ")+"]")
	for _, a := range []string{"[::1]:" + port, "[fe80::1%eth0]:" + port, "[ff02::2%eth0]:" + port} {
		c, err := net.DialTimeout("tcp6", a, probeTimeout)
		if err == nil {
			c.Close()
			res = append(res, a+"=connected")
			continue
		}
		res = append(res, a+"="+errName(err))
	}
	return strings.Join(res, " "), nil
}

func checksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

func icmp6Checksum(src, dst netip.Addr, body []byte) uint16 {
	sa, da := src.As16(), dst.As16()
	ph := append(append([]byte{}, sa[:]...), da[:]...)
	ph = binary.BigEndian.AppendUint32(ph, uint32(len(body)))
	ph = append(ph, 0, 0, 0, unix.IPPROTO_ICMPV6)
	return checksum(append(ph, body...))
}
