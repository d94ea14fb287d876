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
var ErrNoNode = errors.New("no live node has room for another sandbox")

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
// nodes whose Lease is live and that have a free slot, one with the
// template built (no build or copy before the sandbox starts), then the
// one with the most free slots (spreading the load), then by name, so
// that the choice is the same on every replica.
func Place(template string, candidates []Candidate, now time.Time) (string, error) {
	type option struct {
		name  string
		built bool
		free  int
	}
	var options []option
	for _, c := range candidates {
		if c.Lease == nil || node.Expired(c.Lease, now) {
			continue
		}
		if free := c.free(); free > 0 {
			options = append(options, option{c.Node.Name, slices.Contains(c.Node.Status.Templates, template), free})
		}
	}
	if len(options) == 0 {
		return "", fmt.Errorf("placing a sandbox of template %q on one of %d nodes: %w", template, len(candidates), ErrNoNode)
	}
	best := slices.MinFunc(options, func(a, b option) int {
		if a.built != b.built {
			if a.built {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(b.free, a.free), cmp.Compare(a.name, b.name))
	})
	return best.name, nil
}

// Placer places sandboxes on the nodes of a Cache, counting the creates
// it placed whose objects the cache does not show yet, so that creates at
// once on one replica do not all land on the node that looked emptiest.
type Placer struct {
	cache *Cache

	mu       sync.Mutex
	reserved map[string]int // by node: guarded by mu
}

// NewPlacer places on the nodes of c.
func NewPlacer(c *Cache) *Placer {
	return &Placer{cache: c, reserved: make(map[string]int)}
}

// Reserve places a sandbox of template and holds a slot for it on that
// node until release is called: once the Sandbox is in the cache, or its
// create failed. release may be called more than once.
func (p *Placer) Reserve(template string) (nodeName string, release func(), err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var candidates []Candidate
	for _, n := range p.cache.Nodes() {
		lease, _ := p.cache.Lease(n.Name)
		candidates = append(candidates, Candidate{Node: n, Lease: lease, Placed: p.cache.SandboxesOn(n.Name), Reserved: p.reserved[n.Name]})
	}
	nodeName, err = Place(template, candidates, time.Now())
	if err != nil {
		return "", nil, err
	}
	p.reserved[nodeName]++
	var once sync.Once
	return nodeName, func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.reserved[nodeName]--; p.reserved[nodeName] == 0 {
				delete(p.reserved, nodeName)
			}
		})
	}, nil
}
