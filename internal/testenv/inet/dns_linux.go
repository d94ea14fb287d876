package inet

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

const (
	maxUDPAnswer  = 512 // without EDNS, which this server does not speak
	dnsIdle       = 10 * time.Second
	dnsTTL        = 60
	maxDNSMessage = 65535
)

// dnsServer is the authoritative server for the Internet's sites.
type dnsServer struct {
	sites map[string][]netip.Addr // sites and DNS-only names, keyed by canonicalName
	log   func(name string)
}

// answer returns the response to query; false means drop it.
func (s *dnsServer) answer(query []byte) (dnsmessage.Message, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		return dnsmessage.Message{}, false
	}
	resp := dnsmessage.Message{Header: dnsmessage.Header{
		ID:               h.ID,
		Response:         true,
		OpCode:           h.OpCode,
		Authoritative:    true,
		RecursionDesired: h.RecursionDesired,
	}}
	q, err := p.Question()
	if err != nil {
		resp.RCode = dnsmessage.RCodeFormatError
		return resp, true
	}
	resp.Questions = []dnsmessage.Question{q}
	if h.OpCode != 0 {
		resp.RCode = dnsmessage.RCodeNotImplemented
		return resp, true
	}
	name := canonicalName(q.Name.String())
	s.log(name)
	addrs, ok := s.sites[name]
	if !ok {
		resp.RCode = dnsmessage.RCodeNameError
		return resp, true
	}
	if q.Type != dnsmessage.TypeA || q.Class != dnsmessage.ClassINET {
		return resp, true // the name exists, with no records of this type
	}
	for _, a := range addrs {
		resp.Answers = append(resp.Answers, dnsmessage.Resource{
			Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: dnsTTL},
			Body:   &dnsmessage.AResource{A: a.As4()},
		})
	}
	return resp, true
}

func (s *dnsServer) servePackets(pc net.PacketConn) {
	buf := make([]byte, maxDNSMessage)
	for {
		n, from, err := pc.ReadFrom(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		resp, ok := s.answer(buf[:n])
		if !ok {
			continue
		}
		packed, err := resp.Pack()
		if err == nil && len(packed) > maxUDPAnswer {
			// Too many addresses for a datagram: the client asks again
			// over TCP.
			resp.Truncated, resp.Answers = true, nil
			packed, err = resp.Pack()
		}
		if err != nil {
			continue
		}
		pc.WriteTo(packed, from)
	}
}

// serveConn answers length-prefixed queries (RFC 1035 §4.2.2) on c until
// the client goes quiet or sends something that is not a query.
func (s *dnsServer) serveConn(c net.Conn) {
	for {
		c.SetDeadline(time.Now().Add(dnsIdle))
		var n [2]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			return
		}
		query := make([]byte, binary.BigEndian.Uint16(n[:]))
		if _, err := io.ReadFull(c, query); err != nil {
			return
		}
		resp, ok := s.answer(query)
		if !ok {
			return
		}
		packed, err := resp.AppendPack([]byte{0, 0})
		if err != nil || len(packed)-2 > maxDNSMessage {
			return
		}
		binary.BigEndian.PutUint16(packed, uint16(len(packed)-2))
		if _, err := c.Write(packed); err != nil {
			return
		}
	}
}
