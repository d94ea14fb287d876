package control

import (
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/internal/cluster/v1alpha1"
)

var now = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)

// lease is a 40 s Lease renewed ago before now.
func lease(ago time.Duration) *coordinationv1.Lease {
	return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{
		RenewTime:            ptr.To(metav1.NewMicroTime(now.Add(-ago))),
		LeaseDurationSeconds: ptr.To[int32](40),
	}}
}

// candidate is node name, live, with capacity and published sandboxes,
// templates built, and objects placed there in states.
func candidate(name string, capacity, published int32, templates []string, states ...v1alpha1.SandboxState) Candidate {
	c := Candidate{
		Node: &v1alpha1.SandboxNode{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: v1alpha1.SandboxNodeStatus{
				Capacity:  v1alpha1.NodeCapacity{Sandboxes: capacity},
				Sandboxes: published,
				Templates: templates,
			},
		},
		Lease: lease(time.Second),
	}
	for _, s := range states {
		c.Placed = append(c.Placed, &v1alpha1.Sandbox{Spec: v1alpha1.SandboxSpec{Node: name}, Status: v1alpha1.SandboxStatus{State: s}})
	}
	return c
}

func TestPlace(t *testing.T) {
	base := []string{"base"}
	const (
		running = v1alpha1.SandboxRunning
		pending = v1alpha1.SandboxState("") // written, not reported yet
		killed  = v1alpha1.SandboxKilled
		lost    = v1alpha1.SandboxLost
	)
	expired := candidate("expired", 10, 0, base)
	expired.Lease = lease(41 * time.Second)
	noLease := candidate("no-lease", 10, 0, base)
	noLease.Lease = nil
	reserved := candidate("reserved", 2, 0, base)
	reserved.Reserved = 2
	cordoned := candidate("cordoned", 10, 0, base)
	cordoned.Node.Status.Unschedulable = true
	cordoned.Warm = []string{"iwarm3"}
	reservedUncapped := candidate("reserved-uncapped", 0, 0, base)
	reservedUncapped.Reserved = 2
	warm := candidate("warm", 10, 8, base)
	warm.Warm = []string{"iwarm1"}
	fullWarm := candidate("full-warm", 2, 2, base)
	fullWarm.Warm = []string{"iwarm2"}

	tests := []struct {
		name       string
		template   string
		candidates []Candidate
		want       string // "" = ErrNoNode
	}{
		{"none", "base", nil, ""},
		{"the only live one", "base", []Candidate{expired, noLease, candidate("live", 10, 9, base)}, "live"},
		{"only dead ones", "base", []Candidate{expired, noLease}, ""},
		{"a cordoned node is passed over, even with a warm member", "base", []Candidate{cordoned, candidate("busy", 10, 9, base)}, "busy"},
		{"only cordoned ones", "base", []Candidate{cordoned}, ""},
		{"the most free slots", "base", []Candidate{candidate("a", 10, 5, base), candidate("b", 10, 2, base), candidate("c", 4, 0, base)}, "b"},
		{"ties by name", "base", []Candidate{candidate("b", 10, 2, base), candidate("a", 10, 2, base)}, "a"},
		{"the template built before free slots", "desktop", []Candidate{candidate("empty", 10, 0, base), candidate("busy", 10, 8, []string{"base", "desktop"})}, "busy"},
		{"no template anywhere: free slots", "desktop", []Candidate{candidate("a", 10, 3, base), candidate("b", 10, 1, base)}, "b"},
		{"a full node with the template is passed over", "desktop", []Candidate{candidate("full", 2, 2, []string{"desktop"}), candidate("other", 2, 0, base)}, "other"},
		// Placed but not published: Pending objects add to the count.
		{"pending objects count", "base", []Candidate{candidate("a", 3, 0, base, pending, pending), candidate("b", 3, 1, base)}, "b"},
		{"pending objects fill a node", "base", []Candidate{candidate("a", 2, 0, base, pending, pending)}, ""},
		// Running objects not published yet count; published ones not twice.
		{"running objects beyond the published count", "base", []Candidate{candidate("a", 3, 0, base, running, running, running)}, ""},
		{"running objects already published", "base", []Candidate{candidate("a", 3, 2, base, running, running)}, "a"},
		{"ended objects do not count", "base", []Candidate{candidate("a", 2, 0, base, killed, lost, v1alpha1.SandboxError)}, "a"},
		{"reservations count", "base", []Candidate{reserved}, ""},
		{"a warm member before the template built", "base", []Candidate{candidate("cold", 10, 0, base), warm}, "warm"},
		{"a full node's warm member is passed over", "base", []Candidate{candidate("cold", 10, 0, base), fullWarm}, "cold"},
		{"capacity 0 is no cap", "base", []Candidate{candidate("uncapped", 0, 500, base), candidate("capped", 1000, 0, base)}, "uncapped"},
		{"without caps: the fewest sandboxes", "base", []Candidate{candidate("a", 0, 5, base), candidate("b", 0, 2, base, pending), candidate("c", 0, 4, base)}, "b"},
		{"without caps: reservations count", "base", []Candidate{candidate("a", 0, 1, base), reservedUncapped}, "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Place(tt.template, tt.candidates, now)
			if tt.want == "" {
				if !errors.Is(err, ErrNoNode) {
					t.Fatalf("Place = %q, %v; want ErrNoNode", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Place = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
