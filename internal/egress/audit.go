package egress

import (
	"net/netip"
	"sync"
	"time"
)

// Event is one egress decision, for a sandbox's audit trail.
type Event struct {
	// Seq numbers the events of one Ring from 1; it is set by Ring.Record.
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	Kind string    `json:"kind"` // EventDNS, EventDNSAnswer, EventResolve, …
	Name string    `json:"name,omitempty"`
	// Proto is the transport of a packet the firewall dropped ("tcp",
	// "udp", "icmp", …).
	Proto string `json:"proto,omitempty"`
	Type  string `json:"type,omitempty"` // DNS query type: "A", "AAAA", …
	// Addrs are the addresses the decision is about: those answered for an
	// allowed query, the one stripped for a stripped answer.
	Addrs   []netip.Addr `json:"addrs,omitempty"`
	Port    uint16       `json:"port,omitempty"`
	Allowed bool         `json:"allowed"`
	Rule    string       `json:"rule"`
}

// Event kinds.
const (
	// EventDNS is a query from the sandbox, judged by its name.
	EventDNS = "dns"
	// EventDNSAnswer is an address removed from an allowed answer.
	EventDNSAnswer = "dns-answer"
	// EventResolve is a name resolved by the host side itself (Resolver).
	EventResolve = "resolve"
	// EventProxy is a connection through the transparent proxy, judged by
	// its HTTP Host or TLS SNI, or by address if it names none.
	EventProxy = "proxy"
	// EventFirewall is a packet the host firewall dropped (recorded by the
	// gateway from the firewall's drop log; Rule is "firewall:<reason>").
	EventFirewall = "firewall"
)

// Audit receives egress decisions. Record must not block for long and must
// not keep e.Addrs' backing array beyond the call unless it copies it.
type Audit interface {
	Record(e Event)
}

// Ring is a bounded in-memory audit trail of one sandbox: it keeps the last
// n events. It is safe for concurrent use.
type Ring struct {
	mu   sync.Mutex
	buf  []Event // guarded by mu; buf[(seq-1)%len(buf)] holds event seq
	last uint64  // guarded by mu; Seq of the newest event, 0 if none
}

var _ Audit = (*Ring)(nil)

// NewRing returns a Ring keeping the last n events (n < 1 is taken as 1).
func NewRing(n int) *Ring {
	return &Ring{buf: make([]Event, max(n, 1))}
}

// Record implements Audit.
func (r *Ring) Record(e Event) {
	e.Addrs = append([]netip.Addr(nil), e.Addrs...)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last++
	e.Seq = r.last
	r.buf[(e.Seq-1)%uint64(len(r.buf))] = e
}

// Since returns up to limit events with Seq > cursor, oldest first, and the
// cursor to pass next time (the Seq of the last event returned, or cursor
// if there is none). Start with cursor 0. If events after cursor have
// already been overwritten, the first event returned has Seq > cursor+1;
// callers can report the gap. limit < 1 means no limit.
func (r *Ring) Since(cursor uint64, limit int) ([]Event, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := uint64(len(r.buf))
	first := uint64(1)
	if r.last > n {
		first = r.last - n + 1
	}
	from := max(cursor+1, first)
	if from > r.last {
		return nil, cursor
	}
	count := r.last - from + 1
	if limit > 0 && count > uint64(limit) {
		count = uint64(limit)
	}
	out := make([]Event, 0, count)
	for s := from; s < from+count; s++ {
		out = append(out, r.buf[(s-1)%n])
	}
	return out, from + count - 1
}
