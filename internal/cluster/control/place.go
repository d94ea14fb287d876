package control

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/cluster/node"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/v1alpha1"
)

// ErrNoNode is returned by placement when no live node has a free slot.
var ErrNoNode = errors.New("no live node that is not cordoned has room for another sandbox")

// Candidate is a node as placement sees it.
type Candidate struct {
	Node *v1alpha1.SandboxNode
	// Lease is the node's heartbeat; nil if it has none.
	Lease *coordinationv1.Lease
	// Placed are the Sandboxes whose spec.node is the node.
	Placed []*v1alpha1.Sandbox
	// Reserved counts the creates placed on the node whose Sandboxes are
	// not in Placed yet (written, or about to be, by this replica).
	Reserved int
	// Warm are the node's ready warm pool members of the template
	// (status.warm) that no Sandbox is named by and no create of this
	// replica has claimed: a create placed there takes one.
	Warm []string
}

// used is how many sandboxes the node holds or is about to. The node's
// published count is up to a renewal old (10 s) and counts sandboxes made
// through its own API too; the objects placed there count those not
// published yet. Objects not Running yet are surely not in the published
// count; Running ones may or may not be, so the larger of the two sums is
// taken: never less than the truth as far as this replica can know it.
func (c Candidate) used() int {
	var starting, live int
	for _, sb := range c.Placed {
		switch {
		case sb.Status.State.Ended():
		case sb.Status.State == v1alpha1.SandboxRunning || sb.Status.State == v1alpha1.SandboxPaused:
			live++
		default:
			starting++
		}
	}
	return max(int(c.Node.Status.Sandboxes)+starting, live+starting) + c.Reserved
}

// free is how many more sandboxes the node takes; a capacity of 0 is no
// cap (`serve --max-sandboxes 0`).
func (c Candidate) free() int {
	if c.Node.Status.Capacity.Sandboxes == 0 {
		return math.MaxInt
	}
	return int(c.Node.Status.Capacity.Sandboxes) - c.used()
}

// Place chooses, at now, the node of a new sandbox of template: among the
// nodes whose Lease is live, that are not cordoned and that have a free
// slot, one with a warm
// member of the template (no boot before the sandbox runs), then one with
// the template built (no build or copy), then the one with the most free
// slots, then the fewest sandboxes (spreading the load, also over nodes
// without a cap, whose free slots tie), then by name, so that the choice
// is the same on every replica.
func Place(template string, candidates []Candidate, now time.Time) (string, error) {
	type option struct {
		name        string
		warm, built bool
		free, used  int
	}
	var options []option
	for _, c := range candidates {
		if c.Lease == nil || node.Expired(c.Lease, now) || c.Node.Status.Unschedulable {
			continue
		}
		if free := c.free(); free > 0 {
			options = append(options, option{c.Node.Name, len(c.Warm) > 0, slices.Contains(c.Node.Status.Templates, template), free, c.used()})
		}
	}
	if len(options) == 0 {
		return "", fmt.Errorf("placing a sandbox of template %q on one of %d nodes: %w", template, len(candidates), ErrNoNode)
	}
	best := slices.MinFunc(options, func(a, b option) int {
		return cmp.Or(first(a.warm, b.warm), first(a.built, b.built), cmp.Compare(b.free, a.free), cmp.Compare(a.used, b.used), cmp.Compare(a.name, b.name))
	})
	return best.name, nil
}

// first orders true before false.
func first(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}

// Placer places sandboxes on the nodes of a Cache, counting the creates
// it placed whose objects the cache does not show yet, so that creates at
// once on one replica do not all land on the node that looked emptiest,
// nor name the same warm member.
type Placer struct {
	cache *Cache

	mu       sync.Mutex
	reserved map[string]int  // by node: guarded by mu
	claimed  map[string]bool // warm members' IDs: guarded by mu
}

// NewPlacer places on the nodes of c.
func NewPlacer(c *Cache) *Placer {
	return &Placer{cache: c, reserved: make(map[string]int), claimed: make(map[string]bool)}
}

// Placement is where a new sandbox goes: its node, and the ID of the
// node's warm member it is to take, which names its Sandbox; "" for none.
type Placement struct {
	Node, Warm string
}

// Reserve places a sandbox of template and holds a slot for it on that
// node, and the warm member it names, until release is called: once the
// Sandbox is in the cache, or its create failed. release may be called
// more than once.
func (p *Placer) Reserve(template string) (Placement, func(), error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var candidates []Candidate
	for _, n := range p.cache.Nodes() {
		lease, _ := p.cache.Lease(n.Name)
		c := Candidate{Node: n, Lease: lease, Placed: p.cache.SandboxesOn(n.Name), Reserved: p.reserved[n.Name]}
		for _, id := range n.Status.Warm[template] {
			if _, named := p.cache.Sandbox(id); !named && !p.claimed[id] {
				c.Warm = append(c.Warm, id)
			}
		}
		candidates = append(candidates, c)
	}
	nodeName, err := Place(template, candidates, time.Now())
	if err != nil {
		return Placement{}, nil, err
	}
	pl := Placement{Node: nodeName}
	if i := slices.IndexFunc(candidates, func(c Candidate) bool { return c.Node.Name == nodeName }); len(candidates[i].Warm) > 0 {
		pl.Warm = candidates[i].Warm[0] // the oldest: the node lists them so
		p.claimed[pl.Warm] = true
	}
	p.reserved[nodeName]++
	var once sync.Once
	return pl, func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.reserved[nodeName]--; p.reserved[nodeName] == 0 {
				delete(p.reserved, nodeName)
			}
			delete(p.claimed, pl.Warm)
		})
	}, nil
}
