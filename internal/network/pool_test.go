package network

import (
	"errors"
	"net/netip"
	"testing"
)

func TestPool(t *testing.T) {
	p, err := NewPool(netip.MustParsePrefix("10.200.0.5/29")) // masked to .0/29: two slots
	if err != nil {
		t.Fatal(err)
	}
	a, err := p.Allocate("a")
	if err != nil {
		t.Fatal(err)
	}
	want := VethAddrs{Gateway: netip.MustParseAddr("10.200.0.1"), Sandbox: netip.MustParseAddr("10.200.0.2")}
	if a != want {
		t.Errorf("Allocate(a) = %v, want %v", a, want)
	}
	if again, _ := p.Allocate("a"); again != a {
		t.Errorf("Allocate(a) again = %v, want %v", again, a)
	}
	b, err := p.Allocate("b")
	if err != nil {
		t.Fatal(err)
	}
	if b.Gateway != netip.MustParseAddr("10.200.0.5") || b.Sandbox != netip.MustParseAddr("10.200.0.6") {
		t.Errorf("Allocate(b) = %v", b)
	}
	if b.Prefix() != netip.MustParsePrefix("10.200.0.4/30") {
		t.Errorf("Prefix = %v", b.Prefix())
	}
	if _, err := p.Allocate("c"); !errors.Is(err, ErrPoolExhausted) {
		t.Errorf("Allocate(c) on a full pool: %v, want ErrPoolExhausted", err)
	}
	p.Release("a")
	p.Release("a")
	if c, err := p.Allocate("c"); err != nil || c != want {
		t.Errorf("Allocate(c) after release = %v, %v; want %v", c, err, want)
	}

	for _, bad := range []string{"10.0.0.0/31", "fd00::/64"} {
		if _, err := NewPool(netip.MustParsePrefix(bad)); err == nil {
			t.Errorf("NewPool(%s) succeeded", bad)
		}
	}
}

func TestPoolRestore(t *testing.T) {
	addrs := func(gw, sb string) VethAddrs {
		return VethAddrs{Gateway: netip.MustParseAddr(gw), Sandbox: netip.MustParseAddr(sb)}
	}
	tests := []struct {
		name   string
		leases map[string]VethAddrs
		ok     bool
	}{
		{"fits", map[string]VethAddrs{"x": addrs("10.200.0.9", "10.200.0.10"), "y": addrs("10.200.0.1", "10.200.0.2")}, true},
		{"outside the pool", map[string]VethAddrs{"x": addrs("10.201.0.1", "10.201.0.2")}, false},
		{"not a slot", map[string]VethAddrs{"x": addrs("10.200.0.2", "10.200.0.3")}, false},
		{"two ids on one slot", map[string]VethAddrs{"x": addrs("10.200.0.1", "10.200.0.2"), "y": addrs("10.200.0.1", "10.200.0.2")}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _ := NewPool(DefaultPoolPrefix)
			err := p.Restore(tt.leases)
			if (err == nil) != tt.ok {
				t.Fatalf("Restore: %v, want ok=%v", err, tt.ok)
			}
			if !tt.ok {
				if a, _ := p.Allocate("new"); a != addrs("10.200.0.1", "10.200.0.2") {
					t.Errorf("a failed Restore reserved something: new got %v", a)
				}
				return
			}
			for id, want := range tt.leases {
				if got, _ := p.Allocate(id); got != want {
					t.Errorf("Allocate(%s) after Restore = %v, want %v", id, got, want)
				}
			}
			got, _ := p.Allocate("new")
			if got != addrs("10.200.0.5", "10.200.0.6") {
				t.Errorf("Allocate(new) = %v, want the first free slot", got)
			}
		})
	}
}
