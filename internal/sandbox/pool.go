package sandbox

// Warm pools (DESIGN §5): per template, sandboxes booted ahead of demand —
// jail started, network attached with the default policy, envd listening
// with the member's own access token but never initialised, nothing else
// run. Create takes one, writes the request's record over the member's,
// applies the request's egress rules (the UpdateNetwork path), initialises
// envd with the request's env vars and access token (presenting the
// member's, which /init replaces), and hands it out; a background loop
// refills.
//
// A member is recorded in state starting from before it boots, under the
// ID it is later handed out with: the ID is baked into the sandbox
// (hostname, cgroup, network namespace, directory), so it is chosen first.
// Only running and paused sandboxes are ever listed, and a restart's
// reconcile cleans members up like any interrupted create. Members are not
// in Manager.sandboxes, so neither the router nor any API call can reach
// their uninitialised envd.
//
// Members hold sandbox slots like live sandboxes (Config.MaxSandboxes), but
// a create that finds no free slot takes one from a member of another
// template, which is discarded: waiting sandboxes never refuse real demand.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// ErrLimit is returned (wrapped) by Create when the server runs
// Config.MaxSandboxes sandboxes already (429).
var ErrLimit = errors.New("sandbox limit reached")

// PoolSize bounds one template's warm pool.
type PoolSize struct {
	Min int // members kept waiting while the pool is idle
	Max int // members it grows to while takes find it empty
}

// GrowingPool is the pool of n members that --warm-pool TEMPLATE=n sets:
// it grows to 4n under demand.
func GrowingPool(n int) PoolSize { return PoolSize{Min: n, Max: 4 * n} }

// DefaultPoolMembers is the base template's pool when --warm-pool is not
// given. Creates that come i apart are all served while the members booted
// ahead cover a member's boot B (N ≥ B / i: the take after the first N
// needs a member whose boot began at the first take). Back to back
// (create, a command, kill) they come ~30 ms apart on the 2-core test
// machine, and a member boots in 45–75 ms: 2 missed under load, 3 does
// not (docs/PERFORMANCE.md, "Sizing the warm pool").
const DefaultPoolMembers = 3

// DefaultPoolIdle is how long a pool goes without a take before it shrinks
// by one member toward its Min (Config.PoolIdle).
const DefaultPoolIdle = time.Minute

// Pool tending.
const (
	poolTick  = time.Second      // the loop's period when nothing kicks it
	poolRetry = 10 * time.Second // pause after a failed fill
	// Fills in flight per pool. A fill mostly waits (init, envd), so a few
	// side by side refill several times faster than one at a time, which
	// takes without a pause outpace; more would take the CPU from creates.
	poolFills = 4
)

// Reasons recorded for members that are never handed out.
const (
	reasonPoolDiscarded = "warm pool member discarded unused"
	reasonPoolEvicted   = "warm pool member evicted for a create at the sandbox limit"
)

// ParseWarmPools parses the --warm-pool setting: "none" or "0" for no
// pools, or TEMPLATE=N[:MAX] pairs separated by commas, e.g.
// "base=3,code-interpreter-v1=1:4". MAX defaults to 4N; N=0 removes the
// template's pool.
func ParseWarmPools(s string) (map[string]PoolSize, error) {
	out := map[string]PoolSize{}
	if s = strings.TrimSpace(s); s == "" || s == "none" || s == "0" {
		return out, nil
	}
	for item := range strings.SplitSeq(s, ",") {
		name, size, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("warm pool %q: want TEMPLATE=N or TEMPLATE=N:MAX", item)
		}
		minS, maxS, hasMax := strings.Cut(size, ":")
		n, err := strconv.Atoi(minS)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("warm pool %q: size %q is not a count", item, minS)
		}
		p := GrowingPool(n)
		if hasMax {
			if p.Max, err = strconv.Atoi(maxS); err != nil || p.Max < n {
				return nil, fmt.Errorf("warm pool %q: max %q is not a count of at least %d", item, maxS, n)
			}
		}
		if p.Max == 0 {
			delete(out, name)
			continue
		}
		out[name] = p
	}
	return out, nil
}

// FormatWarmPools is the inverse of ParseWarmPools.
func FormatWarmPools(pools map[string]PoolSize) string {
	if len(pools) == 0 {
		return "none"
	}
	var items []string
	for _, name := range slices.Sorted(maps.Keys(pools)) {
		p := pools[name]
		item := fmt.Sprintf("%s=%d", name, p.Min)
		if p != GrowingPool(p.Min) {
			item += fmt.Sprintf(":%d", p.Max)
		}
		items = append(items, item)
	}
	return strings.Join(items, ",")
}

// pool is one template's warm pool. Its fields are guarded by Manager.mu.
type pool struct {
	name    string // the template name it boots
	size    PoolSize
	target  int     // between size.Min and size.Max
	ready   []*warm // oldest first
	filling int
	lastUse time.Time // last take, or last shrink
	retryAt time.Time // no fill before this, after a failure
}

// warm is a booted pool member.
type warm struct {
	rec  store.Sandbox // as recorded at boot: state starting
	inst isolation.Instance
	// caEnv are the env vars of the egress CA installed at boot
	// (trustEgressCA), nil without a gateway: the CA is the member's
	// gateway's, which a take keeps, so the create does not install it.
	caEnv map[string]string
}

func (w *warm) dead() bool {
	select {
	case <-w.inst.Done():
		return true
	default:
		return false
	}
}

// newPools builds the pools of cfg; Start begins filling them.
func newPools(cfg map[string]PoolSize, now time.Time) map[string]*pool {
	pools := map[string]*pool{}
	for name, size := range cfg {
		if size.Max <= 0 {
			continue
		}
		size.Min = min(size.Min, size.Max)
		pools[name] = &pool{name: name, size: size, target: size.Min, lastUse: now}
	}
	return pools
}

// reserveLocked takes a sandbox slot if one is free. The caller holds m.mu.
func (m *Manager) reserveLocked() bool {
	if m.cfg.MaxSandboxes > 0 && len(m.sandboxes)+m.pending >= m.cfg.MaxSandboxes {
		return false
	}
	m.pending++
	return true
}

// admit takes a sandbox slot for a create that no pool serves: a free one,
// or else a pool member's, discarding the member.
func (m *Manager) admit() error {
	m.mu.Lock()
	if m.reserveLocked() {
		m.mu.Unlock()
		return nil
	}
	var victim *warm
	var from *pool
	for _, p := range m.pools {
		if len(p.ready) > 0 && (from == nil || len(p.ready) > len(from.ready)) {
			from = p
		}
	}
	if from != nil {
		victim = from.ready[0]
		from.ready = from.ready[1:]
	}
	m.mu.Unlock()
	if victim == nil {
		return &userError{kind: ErrLimit, msg: fmt.Sprintf("this server runs its maximum of %d sandboxes; kill one first", m.cfg.MaxSandboxes)}
	}
	m.discard(victim, reasonPoolEvicted, false) // its slot is the create's now
	return nil
}

// release gives back a slot taken by admit, a fill or a take; a live
// sandbox holds its slot through Manager.sandboxes instead.
func (m *Manager) release() {
	m.mu.Lock()
	m.pending--
	m.mu.Unlock()
	m.kick()
}

// kick wakes the pool loop.
func (m *Manager) kick() {
	select {
	case m.kicks <- struct{}{}:
	default:
	}
}

// notePoolsChanged tells PoolsChanged's reader that ready members came or
// went.
func (m *Manager) notePoolsChanged() {
	select {
	case m.poolsChanged <- struct{}{}:
	default:
	}
}

// PoolsChanged receives when a warm pool's ready members change (a take, a
// fill, a discard): what Pools says of their IDs is new. Changes while
// nobody reads coalesce into one.
func (m *Manager) PoolsChanged() <-chan struct{} { return m.poolsChanged }

// takeWarm returns a member of tmpl's pool for a create whose egress is ec,
// the member of ID id when id is set, or nil when the pool has none or
// cannot serve it; a take that outpaces the refills grows the pool toward
// its Max. The member keeps its slot, which the caller releases once the
// sandbox is live.
func (m *Manager) takeWarm(tmpl *template.Template, ec egressConfig, id string) *warm {
	// Members were attached with the template's default bandwidth, which
	// only a new attachment changes.
	if def, err := m.parseEgress(nil, nil, tmpl); err != nil || def.bw != ec.bw {
		return nil
	}
	m.mu.Lock()
	p := m.pools[tmpl.Name]
	if p == nil {
		m.mu.Unlock()
		return nil
	}
	var w *warm
	var stale []*warm
	if id != "" {
		if i := slices.IndexFunc(p.ready, func(c *warm) bool { return c.rec.ID == id }); i >= 0 {
			w = p.ready[i]
			p.ready = slices.Delete(p.ready, i, i+1)
		}
	} else if len(p.ready) > 0 {
		w, p.ready = p.ready[0], p.ready[1:]
	}
	for w != nil && (w.rec.TemplateID != tmpl.ID || w.dead()) { // rebuilt template, or died waiting
		stale = append(stale, w)
		w = nil
		if id == "" && len(p.ready) > 0 {
			w, p.ready = p.ready[0], p.ready[1:]
		}
	}
	p.lastUse = m.cfg.Now()
	// Takes outpace refills when one finds the pool empty or a refill
	// still under way: the pool grows ahead of the next.
	if (w == nil || p.filling > 0) && p.target < p.size.Max {
		p.target++
	}
	m.mu.Unlock()
	for _, c := range stale {
		m.discard(c, reasonPoolDiscarded, true)
	}
	if w != nil || len(stale) > 0 {
		m.notePoolsChanged()
	}
	m.kick()
	return w
}

// handOut turns member w into the sandbox that rec (not yet stored)
// describes, for req: the request's record, egress rules, env vars and
// access token, under the member's ID.
func (m *Manager) handOut(ctx context.Context, w *warm, rec store.Sandbox, req CreateRequest, tmpl *template.Template, ec egressConfig) (store.Sandbox, error) {
	defer m.release() // the slot passes to the live set in finish
	id := w.rec.ID
	log := m.sandboxLog(id)
	log.Info("creating sandbox from the warm pool", "template", tmpl.ID)
	t0 := rec.StartedAt
	rec.ID = id
	stored, err := m.cfg.Store.UpdateSandbox(ctx, id, func(sb *store.Sandbox) error {
		backend := sb.BackendState
		*sb = rec
		sb.BackendState = backend
		return nil
	})
	if err != nil {
		return store.Sandbox{}, m.abort(ctx, rec, w.inst, log, "recording the request", err)
	}
	rec = stored
	// The member runs the default policy; the request's replaces it before
	// envd runs anything.
	custom := req.Network != nil || req.AllowInternetAccess != nil
	if custom && m.cfg.Network != nil && w.inst.Link().Gateway.IsValid() {
		if err := m.cfg.Network.Update(ctx, id, ec.rules); err != nil {
			return store.Sandbox{}, m.abort(ctx, rec, w.inst, log, "applying the egress rules", err)
		}
	}
	return m.finish(ctx, rec, w.inst, w.rec.EnvdAccessToken, tmpl, req.EnvVars, false, w.caEnv, log, t0)
}

// poolLoop keeps every pool at its target.
func (m *Manager) poolLoop() {
	t := time.NewTicker(poolTick)
	defer t.Stop()
	for {
		m.tendPools()
		select {
		case <-m.stop:
			return
		case <-m.kicks:
		case <-t.C:
		}
	}
}

// tendPools shrinks idle pools, drops dead or surplus members and starts
// the fills that bring each pool to its target, as far as slots allow.
func (m *Manager) tendPools() {
	now := m.cfg.Now()
	var drop []*warm
	var fills []*pool
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	for _, p := range m.pools {
		if p.target > p.size.Min && now.Sub(p.lastUse) >= m.cfg.PoolIdle {
			p.target--
			p.lastUse = now
		}
		p.ready = slices.DeleteFunc(p.ready, func(w *warm) bool {
			if w.dead() {
				drop = append(drop, w)
				return true
			}
			return false
		})
		for len(p.ready) > p.target {
			drop = append(drop, p.ready[len(p.ready)-1])
			p.ready = p.ready[:len(p.ready)-1]
		}
		for len(p.ready)+p.filling < p.target && p.filling < poolFills && !now.Before(p.retryAt) && m.reserveLocked() {
			p.filling++
			fills = append(fills, p)
		}
	}
	m.mu.Unlock()
	for _, w := range drop {
		m.discard(w, reasonPoolDiscarded, true)
	}
	if len(drop) > 0 {
		m.notePoolsChanged()
	}
	for _, p := range fills {
		m.goroutine(func() { m.fill(p) })
	}
}

// fill boots one member for p, whose slot tendPools reserved.
func (m *Manager) fill(p *pool) {
	ctx, cancel := context.WithTimeout(context.Background(), initTimeout)
	defer cancel()
	w, err := m.bootWarm(ctx, p.name)
	m.mu.Lock()
	p.filling--
	if err != nil {
		p.retryAt = m.cfg.Now().Add(poolRetry)
	}
	keep := err == nil && !m.closed && len(p.ready) < p.target
	if keep {
		p.ready = append(p.ready, w)
	}
	m.mu.Unlock()
	switch {
	case err != nil:
		m.log.Warn("filling the warm pool", "template", p.name, "err", err)
		m.release()
	case !keep:
		m.discard(w, reasonPoolDiscarded, true)
	default:
		m.notePoolsChanged()
		m.kick()
	}
}

// bootWarm records and boots a member of template name.
func (m *Manager) bootWarm(ctx context.Context, name string) (*warm, error) {
	tmpl, err := m.cfg.Templates.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("looking up template %q: %w", name, err)
	}
	res, err := m.resources(tmpl)
	if err != nil {
		return nil, err
	}
	if err := m.checkDisk(res.DiskSizeMB); err != nil {
		return nil, err
	}
	rec, err := m.record(ctx, store.Sandbox{
		TemplateID: tmpl.ID,
		Alias:      tmpl.Name,
		State:      store.StateStarting,
		StartedAt:  m.cfg.Now(),
		CPUCount:   res.CPUCount,
		MemoryMB:   res.MemoryMB,
		DiskSizeMB: res.DiskSizeMB,
		Backend:    m.backendFor(tmpl).Name(),
		// The member's own, until a create replaces it with the
		// request's; nothing but this manager knows it.
		EnvdAccessToken: newToken(),
	})
	if err != nil {
		return nil, err
	}
	log := m.log.With("sandbox_id", rec.ID)
	inst, err := m.boot(ctx, rec, tmpl, res, nil, log)
	if err != nil {
		return nil, err
	}
	if err := warmUp(ctx, inst, rec.EnvdAccessToken, cmp.Or(tmpl.User, defaultUser)); err != nil {
		return nil, m.abort(ctx, rec, inst, log, "warming up", err)
	}
	// The CA's trust stores are written now rather than by the create
	// that takes the member: ~10 ms of that create, four requests to envd.
	caEnv, err := m.trustEgressCA(ctx, rec, inst, rec.EnvdAccessToken)
	if err != nil {
		return nil, m.abort(ctx, rec, inst, log, "installing the egress CA", err)
	}
	if caEnv == nil {
		caEnv = map[string]string{} // none to install: not installed at the take either
	}
	log.Debug("warm pool member ready", "template", tmpl.ID)
	return &warm{rec: rec, inst: inst, caEnv: caEnv}, nil
}

// discard stops member w and records why it ended unused; release gives
// its slot back.
func (m *Manager) discard(w *warm, reason string, release bool) {
	ctx := context.Background()
	m.detachNetwork(w.rec.ID)
	if err := w.inst.Stop(ctx); err != nil {
		m.log.Error("stopping a warm pool member", "sandbox_id", w.rec.ID, "err", err)
	}
	if err := m.cfg.Store.SetState(ctx, w.rec.ID, store.StateKilled, reason); err != nil {
		m.log.Error("recording a discarded warm pool member", "sandbox_id", w.rec.ID, "err", err)
	}
	if release {
		m.release()
	}
}

// drainPools discards every waiting member; Close calls it after the
// fills have ended.
func (m *Manager) drainPools() {
	m.mu.Lock()
	var all []*warm
	for _, p := range m.pools {
		all = append(all, p.ready...)
		p.ready = nil
	}
	m.mu.Unlock()
	for _, w := range all {
		m.discard(w, reasonPoolDiscarded, true)
	}
}

// PoolStatus is one warm pool's state.
type PoolStatus struct {
	Ready, Filling, Target int
	// IDs are the ready members', oldest first: a create that names one
	// (CreateRequest.ID) takes that member.
	IDs []string
}

// Pools returns the state of every warm pool, by template name.
func (m *Manager) Pools() map[string]PoolStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]PoolStatus, len(m.pools))
	for name, p := range m.pools {
		ids := make([]string, len(p.ready))
		for i, w := range p.ready {
			ids[i] = w.rec.ID
		}
		out[name] = PoolStatus{Ready: len(p.ready), Filling: p.filling, Target: p.target, IDs: ids}
	}
	return out
}
