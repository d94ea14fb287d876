package network

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
)

// DefaultPoolPrefix is the default sandbox address pool: 16384 /30 links.
// It sits high in 10/8, away from the 10.0.x and 10.1.x networks that home
// and cloud networks usually pick; an operator whose network uses it sets
// another prefix.
var DefaultPoolPrefix = netip.MustParsePrefix("10.200.0.0/16")

// ErrPoolExhausted is returned by Pool.Allocate when every slot is in use.
var ErrPoolExhausted = errors.New("address pool exhausted")

// VethAddrs are the two addresses of one sandbox's /30 link: Gateway on the
// host end, Sandbox on the end inside the namespace.
type VethAddrs struct {
	Gateway netip.Addr
	Sandbox netip.Addr
}

// Prefix returns the /30 holding both addresses.
func (a VethAddrs) Prefix() netip.Prefix {
	p, _ := a.Gateway.Prefix(30)
	return p
}

// Pool hands out /30 links from an IPv4 prefix, one per sandbox id. Slot i
// is the i-th /30: its first host address is the gateway, the second the
// sandbox. The pool itself is in memory; after a restart the caller
// restores the leases of surviving sandboxes with Restore before allocating
// (HostVeths reads them back from the kernel).
type Pool struct {
	prefix netip.Prefix
	slots  int

	mu    sync.Mutex // guards owner, byID, next
	owner map[int]string
	byID  map[string]int
	next  int
}

// NewPool returns a pool over prefix, an IPv4 prefix of at most /30.
func NewPool(prefix netip.Prefix) (*Pool, error) {
	if !prefix.IsValid() || !prefix.Addr().Is4() || prefix.Bits() > 30 {
		return nil, fmt.Errorf("address pool %s: want an IPv4 prefix of /30 or shorter", prefix)
	}
	prefix = prefix.Masked()
	return &Pool{
		prefix: prefix,
		slots:  1 << (30 - prefix.Bits()),
		owner:  make(map[int]string),
		byID:   make(map[string]int),
	}, nil
}

// Prefix returns the pool's prefix.
func (p *Pool) Prefix() netip.Prefix { return p.prefix }

// Allocate returns id's link addresses, taking a free slot if id holds
// none. Calling it again for the same id returns the same addresses.
func (p *Pool) Allocate(id string) (VethAddrs, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i, ok := p.byID[id]; ok {
		return p.addrs(i), nil
	}
	for n := 0; n < p.slots; n++ {
		i := (p.next + n) % p.slots
		if _, used := p.owner[i]; !used {
			p.owner[i] = id
			p.byID[id] = i
			p.next = (i + 1) % p.slots
			return p.addrs(i), nil
		}
	}
	return VethAddrs{}, fmt.Errorf("allocating addresses for %s: %w", id, ErrPoolExhausted)
}

// Restore marks the given leases (sandbox id → addresses) as in use, e.g.
// those HostVeths found after a restart. A lease outside the pool, not on a
// slot boundary, or on a slot held by another id is an error, and then
// nothing is restored.
func (p *Pool) Restore(leases map[string]VethAddrs) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	slots := make(map[string]int, len(leases))
	seen := make(map[int]string, len(leases))
	for id, a := range leases {
		i, ok := p.slot(a)
		if !ok {
			return fmt.Errorf("restoring lease of %s: %s/%s is not a link of pool %s", id, a.Gateway, a.Sandbox, p.prefix)
		}
		if o, used := p.owner[i]; used && o != id {
			return fmt.Errorf("restoring lease of %s: %s is held by %s", id, a.Gateway, o)
		}
		if o, dup := seen[i]; dup {
			return fmt.Errorf("restoring lease of %s: %s is also leased to %s", id, a.Gateway, o)
		}
		if j, held := p.byID[id]; held && j != i {
			return fmt.Errorf("restoring lease of %s: it already holds %s", id, p.addrs(j).Gateway)
		}
		seen[i] = id
		slots[id] = i
	}
	for id, i := range slots {
		p.owner[i] = id
		p.byID[id] = i
	}
	return nil
}

// Release frees id's slot. Releasing an id without one does nothing.
func (p *Pool) Release(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i, ok := p.byID[id]; ok {
		delete(p.byID, id)
		delete(p.owner, i)
	}
}

func (p *Pool) addrs(i int) VethAddrs {
	b := p.prefix.Addr().As4()
	base := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	base += uint32(i) * 4
	return VethAddrs{Gateway: u32Addr(base + 1), Sandbox: u32Addr(base + 2)}
}

func (p *Pool) slot(a VethAddrs) (int, bool) {
	if !a.Gateway.Is4() || !p.prefix.Contains(a.Gateway) {
		return 0, false
	}
	b := a.Gateway.As4()
	pb := p.prefix.Addr().As4()
	off := (uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])) -
		(uint32(pb[0])<<24 | uint32(pb[1])<<16 | uint32(pb[2])<<8 | uint32(pb[3]))
	if off%4 != 1 {
		return 0, false
	}
	i := int(off / 4)
	if p.addrs(i) != a {
		return 0, false
	}
	return i, true
}

func u32Addr(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
