package network

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/mdlayher/netlink"
	vnl "github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The NFLOG protocol, from linux/netfilter/nfnetlink_log.h; x/sys/unix
// has only the subsystem number.
const (
	nfulnlMsgPacket = 0 // NFULNL_MSG_PACKET
	nfulnlMsgConfig = 1 // NFULNL_MSG_CONFIG

	nfulaCfgCmd      = 1 // NFULA_CFG_CMD: struct nfulnl_msg_config_cmd
	nfulaCfgMode     = 2 // NFULA_CFG_MODE: struct nfulnl_msg_config_mode
	nfulnlCfgCmdBind = 1 // NFULNL_CFG_CMD_BIND
	nfulnlCopyPacket = 2 // NFULNL_COPY_PACKET

	nfulaTimestamp    = 3  // NFULA_TIMESTAMP: struct nfulnl_msg_packet_timestamp
	nfulaIfindexIndev = 4  // NFULA_IFINDEX_INDEV: __be32
	nfulaPayload      = 9  // NFULA_PAYLOAD: the packet from its IP header
	nfulaPrefix       = 10 // NFULA_PREFIX: NUL-terminated
)

// dropCopyRange is how much of a dropped packet the kernel copies: the IP
// header with room for options or extension headers, and the ports.
const dropCopyRange = 128

// Drop is one packet the firewall dropped from a sandbox.
type Drop struct {
	Time   time.Time
	HostIf string // the sandbox veth's host end; empty if it is gone
	Reason string // DropHost, DropIPv6, DropSandbox, DropBlocked or DropDefault
	Proto  string // "tcp", "udp", "icmp", "icmpv6" or the protocol number
	Src    netip.Addr
	Dst    netip.Addr
	// DstPort is the TCP or UDP destination port, 0 for other protocols
	// and for fragments after the first.
	DstPort uint16
}

// DropLog reads the firewall's drop log: the NFLOG group of
// FirewallConfig.LogGroup, in the network namespace it was opened in
// (the host's, where the firewall is). A group has one reader on the
// host: the server owns its group, and opening a group that another
// socket has bound fails.
type DropLog struct {
	conn *netlink.Conn

	mu      sync.Mutex // held by Read for its duration; guards the fields below
	pending []netlink.Message
}

// OpenDropLog binds the NFLOG group, copying the first bytes of each
// logged packet.
func OpenDropLog(group uint16) (*DropLog, error) {
	if group == 0 {
		return nil, errors.New("opening drop log: group 0 means no logging")
	}
	conn, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return nil, fmt.Errorf("opening drop log %d: %w", group, err)
	}
	// Room for every rule's burst at once.
	if err := conn.SetReadBuffer(1 << 20); err != nil {
		conn.Close()
		return nil, fmt.Errorf("opening drop log %d: %w", group, err)
	}
	l := &DropLog{conn: conn}
	if err := l.bind(group); err != nil {
		conn.Close()
		return nil, fmt.Errorf("binding drop log %d: %w", group, err)
	}
	return l, nil
}

// bind binds the group and sets the copy mode in one config message,
// which the kernel handles in that order.
func (l *DropLog) bind(group uint16) error {
	ae := netlink.NewAttributeEncoder()
	ae.Bytes(nfulaCfgCmd, []byte{nfulnlCfgCmdBind})
	mode := binary.BigEndian.AppendUint32(nil, dropCopyRange)
	ae.Bytes(nfulaCfgMode, append(mode, nfulnlCopyPacket, 0))
	attrs, err := ae.Encode()
	if err != nil {
		return err
	}
	req, err := l.conn.Send(netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_ULOG<<8 | nfulnlMsgConfig),
			Flags: netlink.Request | netlink.Acknowledge,
		},
		Data: append(nfgenmsg(unix.AF_UNSPEC, group), attrs...),
	})
	if err != nil {
		return err
	}
	// Packets may be queued ahead of the acknowledgement once the group
	// is bound; they are kept for Read.
	for {
		msgs, err := l.conn.Receive() // an error reply is returned as err
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.Header.Type == netlink.Error && m.Header.Sequence == req.Header.Sequence {
				return nil
			}
			l.pending = append(l.pending, m)
		}
	}
}

// nfgenmsg is struct nfgenmsg (linux/netfilter/nfnetlink.h), which starts
// every nfnetlink message: family, version, resource id (the group).
func nfgenmsg(family uint8, resID uint16) []byte {
	return binary.BigEndian.AppendUint16([]byte{family, unix.NFNETLINK_V0}, resID)
}

// Read calls fn for each drop until ctx ends or the socket fails; ctx
// ending returns nil. Drops over a rule's rate limit are not logged, and
// those the kernel could not queue because the reader fell behind are
// lost. Calls to Read take turns.
func (l *DropLog) Read(ctx context.Context, fn func(Drop)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.conn.SetReadDeadline(time.Time{}); err != nil {
		return fmt.Errorf("reading drop log: %w", err)
	}
	// A deadline in the past wakes the blocked Receive. Waiting for the
	// func if it has started keeps it from hitting the next Read.
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(fired)
		l.conn.SetReadDeadline(time.Unix(1, 0))
	})
	defer func() {
		if !stop() {
			<-fired
		}
	}()
	msgs := l.pending
	l.pending = nil
	for {
		for _, m := range msgs {
			if d, ok := l.drop(m, time.Now()); ok {
				fn(d)
			}
		}
		var err error
		msgs, err = l.conn.Receive()
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, unix.ENOBUFS) {
			continue // messages were lost, the socket is fine
		}
		if err != nil {
			return fmt.Errorf("reading drop log: %w", err)
		}
	}
}

// Close unbinds the group (the kernel does so when the socket closes) and
// ends a Read.
func (l *DropLog) Close() error {
	if err := l.conn.Close(); err != nil {
		return fmt.Errorf("closing drop log: %w", err)
	}
	return nil
}

// drop decodes an NFULNL_MSG_PACKET; other messages (the NLMSG_DONE that
// ends a batch) and undecodable ones are not drops.
func (l *DropLog) drop(m netlink.Message, now time.Time) (Drop, bool) {
	d, ifindex, ok := parseDrop(m, now)
	if !ok {
		return Drop{}, false
	}
	if ifindex != 0 {
		d.HostIf = l.ifName(ifindex)
	}
	return d, true
}

// parseDrop decodes a packet message; its in-interface is returned as the
// index, for the caller to name. now is the time if the kernel sent none.
func parseDrop(m netlink.Message, now time.Time) (d Drop, ifindex uint32, ok bool) {
	if m.Header.Type != netlink.HeaderType(unix.NFNL_SUBSYS_ULOG<<8|nfulnlMsgPacket) || len(m.Data) < 4 {
		return Drop{}, 0, false
	}
	ad, err := netlink.NewAttributeDecoder(m.Data[4:])
	if err != nil {
		return Drop{}, 0, false
	}
	ad.ByteOrder = binary.BigEndian
	d.Time = now
	for ad.Next() {
		switch ad.Type() {
		case nfulaPrefix:
			d.Reason = ad.String()
		case nfulaIfindexIndev:
			ifindex = ad.Uint32()
		case nfulaTimestamp:
			if b := ad.Bytes(); len(b) == 16 {
				sec, usec := binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:])
				d.Time = time.Unix(int64(sec), int64(usec)*1000)
			}
		case nfulaPayload:
			d.Proto, d.Src, d.Dst, d.DstPort = parseIP(ad.Bytes())
		}
	}
	if ad.Err() != nil {
		return Drop{}, 0, false
	}
	return d, ifindex, true
}

// parseIP reads the protocol, addresses and TCP/UDP destination port from
// an IPv4 or IPv6 packet, as far as b (a copy range's worth) holds them.
func parseIP(b []byte) (proto string, src, dst netip.Addr, dport uint16) {
	if len(b) == 0 {
		return "", src, dst, 0
	}
	var p uint8
	var l4 []byte // the transport header; nil if not in b or not in this fragment
	switch b[0] >> 4 {
	case 4:
		ihl := int(b[0]&0x0f) * 4
		if ihl < 20 || len(b) < ihl {
			return "", src, dst, 0
		}
		p = b[9]
		src, dst = netip.AddrFrom4([4]byte(b[12:16])), netip.AddrFrom4([4]byte(b[16:20]))
		if binary.BigEndian.Uint16(b[6:8])&0x1fff == 0 {
			l4 = b[ihl:]
		}
	case 6:
		if len(b) < 40 {
			return "", src, dst, 0
		}
		src, dst = netip.AddrFrom16([16]byte(b[8:24])), netip.AddrFrom16([16]byte(b[24:40]))
		p, l4 = ipv6Transport(b[6], b[40:])
	default:
		return "", src, dst, 0
	}
	if (p == unix.IPPROTO_TCP || p == unix.IPPROTO_UDP) && len(l4) >= 4 {
		dport = binary.BigEndian.Uint16(l4[2:4])
	}
	return protoName(p), src, dst, dport
}

// ipv6Transport skips the extension headers after the fixed header (next
// is its Next Header, b what follows) and returns the upper-layer
// protocol and its header, nil if b ends first or this is not the first
// fragment.
func ipv6Transport(next uint8, b []byte) (uint8, []byte) {
	for {
		var n int
		switch next {
		case unix.IPPROTO_HOPOPTS, unix.IPPROTO_ROUTING, unix.IPPROTO_DSTOPTS:
			if len(b) < 2 {
				return next, nil
			}
			n = (int(b[1]) + 1) * 8
		case unix.IPPROTO_AH:
			if len(b) < 2 {
				return next, nil
			}
			n = (int(b[1]) + 2) * 4
		case unix.IPPROTO_FRAGMENT:
			if len(b) < 8 {
				return next, nil
			}
			if binary.BigEndian.Uint16(b[2:4])&0xfff8 != 0 {
				return b[0], nil
			}
			n = 8
		default:
			return next, b
		}
		if len(b) < n {
			return next, nil
		}
		next, b = b[0], b[n:]
	}
}

func protoName(p uint8) string {
	switch p {
	case unix.IPPROTO_TCP:
		return "tcp"
	case unix.IPPROTO_UDP:
		return "udp"
	case unix.IPPROTO_ICMP:
		return "icmp"
	case unix.IPPROTO_ICMPV6:
		return "icmpv6"
	}
	return strconv.Itoa(int(p))
}

// ifName names the interface with index i, "" if it is gone. It asks the
// kernel every time: a veth's host end is created inside the sandbox's
// namespace and keeps the index it got there, so indexes of ended
// sandboxes come back soon and a cache would name the wrong sandbox.
func (l *DropLog) ifName(i uint32) string {
	link, err := vnl.LinkByIndex(int(i))
	if err != nil {
		return ""
	}
	return link.Attrs().Name
}
