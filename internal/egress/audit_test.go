package egress

import (
	"net/netip"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func seqs(es []Event) []uint64 {
	var out []uint64
	for _, e := range es {
		out = append(out, e.Seq)
	}
	return out
}

func TestRing(t *testing.T) {
	r := NewRing(3)
	if es, next := r.Since(0, 0); es != nil || next != 0 {
		t.Fatalf("empty ring: %v, %d", es, next)
	}
	addrs := []netip.Addr{netip.MustParseAddr("203.0.113.1")}
	for i := range 5 {
		r.Record(Event{Name: string(rune('a' + i)), Addrs: addrs})
	}
	addrs[0] = netip.MustParseAddr("10.0.0.1") // the ring keeps its own copy
	tests := []struct {
		cursor   uint64
		limit    int
		want     []uint64
		wantNext uint64
	}{
		{0, 0, []uint64{3, 4, 5}, 5}, // 1 and 2 were overwritten: the gap shows
		{2, 0, []uint64{3, 4, 5}, 5},
		{3, 0, []uint64{4, 5}, 5},
		{3, 1, []uint64{4}, 4},
		{5, 0, nil, 5},
		{9, 0, nil, 9},
	}
	for _, tt := range tests {
		es, next := r.Since(tt.cursor, tt.limit)
		if diff := cmp.Diff(tt.want, seqs(es)); diff != "" || next != tt.wantNext {
			t.Errorf("Since(%d, %d): next %d (want %d), seqs (-want +got):\n%s", tt.cursor, tt.limit, next, tt.wantNext, diff)
		}
	}
	es, _ := r.Since(4, 1)
	if es[0].Name != "e" || es[0].Addrs[0].String() != "203.0.113.1" {
		t.Errorf("event 5 = %+v", es[0])
	}
}

func TestRingConcurrent(t *testing.T) {
	r := NewRing(64)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				r.Record(Event{Kind: EventDNS})
			}
		})
	}
	var cursor uint64
	for range 50 {
		es, next := r.Since(cursor, 10)
		for i, e := range es {
			if i > 0 && e.Seq != es[i-1].Seq+1 {
				t.Fatalf("non-consecutive seqs %d, %d", es[i-1].Seq, e.Seq)
			}
		}
		cursor = next
	}
	wg.Wait()
	if es, _ := r.Since(0, 0); len(es) != 64 || es[63].Seq != 800 {
		t.Errorf("after 800 records: %d events, last %d", len(es), es[len(es)-1].Seq)
	}
}
