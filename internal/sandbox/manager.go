// Package sandbox is the lifecycle manager: it creates sandboxes on an
// isolation backend from templates, initialises envd in them, enforces
// timeouts, pauses and resumes, samples metrics, and reconciles with the
// store after a restart. Every state change is written to the store before
// it is acted on.
//
// The store is the source of truth for what callers read (Get, List); the
// Manager keeps, per live sandbox, the backend Instance, the fields its
// background loops need (state, endAt, autoPause), the connections handed
// out by Dial and a ring of metric samples.
//
// Locking: Manager.mu guards the set of live sandboxes. Each sandbox has an
// op mutex that serializes its lifecycle transitions (pause, resume, kill,
// expiry, death) and is held across store writes and backend calls — so one
// slow sandbox never blocks another — and a mu that guards its in-memory
// fields and is never held across I/O.
package sandbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// Errors the API and router map to HTTP statuses. The errors this package
// returns wrap them; for ErrNotFound, ErrConflict and ErrInvalid the
// returned error's text is meant for the caller (for example "Timeout
// cannot be greater than 24 hours").
var (
	ErrNotFound = errors.New("sandbox not found")             // 404; killed sandboxes too
	ErrConflict = errors.New("sandbox is in the wrong state") // 409 (already paused, transitioning)
	ErrInvalid  = errors.New("invalid request")               // 400 (bad timeout, unknown template, …)
	// ErrUnavailable is a create of a template that is being built
	// (it wraps the template's *template.BuildingError): 503, retry.
	ErrUnavailable = errors.New("template is being built")
	ErrPaused      = errors.New("sandbox is paused") // router: 502 for a paused sandbox
)

// Templates finds a template by name, name:tag or ID.
type Templates interface {
	Lookup(ref string) (*template.Template, error)
}

// Images makes a template's ext4 image (template.Builder.Ext4), for a
// backend that boots from one (Capabilities.RootImage).
type Images interface {
	Ext4(ctx context.Context, t *template.Template) (string, error)
}

// Config wires a Manager.
type Config struct {
	Store *store.Store
	// Backend starts new sandboxes, warm pool members included.
	Backend isolation.Backend
	// OtherBackends are further backends whose sandboxes, started by an
	// earlier server with another choice, are adopted and managed until
	// they end; each sandbox's record names its backend. Names must
	// differ.
	OtherBackends []isolation.Backend
	// TemplateBackends names, by template name, the backend (Backend or
	// one of OtherBackends) that starts that template's sandboxes instead
	// of Backend.
	TemplateBackends map[string]string
	Templates        Templates
	// Images makes templates' ext4 images for a backend that boots from
	// one; nil: such a backend cannot start sandboxes.
	Images   Images
	EnvdPath string // host path of the envd binary mounted into sandboxes
	// Tools are further host binaries mounted read-only into every
	// sandbox: guest path → host path.
	Tools map[string]string
	Log   *slog.Logger
	// Network enforces egress policies; nil when sandboxes have no
	// network beyond loopback.
	Network Network
	// MaxBandwidth is every sandbox's default bandwidth cap and the most a
	// create request may ask for (network.bandwidth); zero: unlimited.
	MaxBandwidth network.Bandwidth

	MaxTimeout    time.Duration // longest allowed timeout (default 24h; NoTimeoutLimit for none)
	MetricsEvery  time.Duration // sampling period (default 5s)
	DefaultCPU    int           // default 2
	DefaultMemory int           // MB, default 512
	DefaultDisk   int           // MB, default 1024
	Now           func() time.Time

	// DefaultDiskIO caps each sandbox's I/O on its disk where its template
	// does not; zero fields: no cap.
	DefaultDiskIO isolation.DiskIO
	// Max bounds what a template may give its sandboxes: a create from a
	// template above it is refused.
	Max Maxima

	// WarmPools sizes the warm pool of each template, by name (pool.go);
	// none when empty.
	WarmPools map[string]PoolSize
	// PoolIdle is how long a pool goes without a take before it shrinks a
	// step (default DefaultPoolIdle).
	PoolIdle time.Duration
	// MaxSandboxes caps the sandboxes this server runs at once, warm pool
	// members included; 0 = no cap.
	MaxSandboxes int
	// DiskDir is where the backend keeps sandbox disk images; while its
	// file system has less free space than DiskReserve plus a sandbox's
	// disk size, creates fail with ErrNoSpace (bounds.go). "" = no check.
	DiskDir     string
	DiskReserve DiskReserve
	// PausedRetention is how long a sandbox stays paused before it is
	// killed (bounds.go); 0 = until it is killed or resumed.
	PausedRetention time.Duration
	// PauseInRAM is how long a paused sandbox stays frozen in RAM before
	// it is saved to disk and stopped, where its backend can save memory
	// (a memory snapshot); 0: at once (pause.go).
	PauseInRAM time.Duration
	// LogRetention is how long an ended sandbox's log is kept (logs.go;
	// default DefaultLogRetention).
	LogRetention time.Duration

	// SnapshotDir holds a directory per snapshot (snapshot.go); "" leaves
	// snapshots, forks and pauses without memory out.
	SnapshotDir string
	// SnapshotBudget bounds the disk the listed snapshots take, in bytes;
	// 0: no bound.
	SnapshotBudget uint64
	// Volumes finds the volumes sandboxes mount (volumes.go); nil: a
	// create that names one is refused.
	Volumes Volumes

	// diskSpace reports the free and total bytes of a directory's file
	// system (default: statfs); a test seam.
	diskSpace func(dir string) (avail, total uint64, err error)

	// BuildNetwork enforces the egress policy of template build steps
	// (RunStep, steps.go); nil: build steps reach no network at all.
	BuildNetwork Network
	// StepResources are each build step sandbox's quotas; zero fields
	// take the DefaultStep* values.
	StepResources isolation.Resources
}

// NoTimeoutLimit as Config.MaxTimeout lets a sandbox ask for any timeout
// the API can carry.
const NoTimeoutLimit time.Duration = math.MaxInt64

// Defaults of the zero Config fields.
const (
	DefaultMaxTimeout   = 24 * time.Hour
	DefaultMetricsEvery = 5 * time.Second
	DefaultCPU          = 2
	DefaultMemoryMB     = 512
	DefaultDiskMB       = 1024
)

func (c *Config) setDefaults() {
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.MaxTimeout <= 0 {
		c.MaxTimeout = DefaultMaxTimeout
	}
	if c.LogRetention <= 0 {
		c.LogRetention = DefaultLogRetention
	}
	if c.MetricsEvery <= 0 {
		c.MetricsEvery = DefaultMetricsEvery
	}
	if c.DefaultCPU <= 0 {
		c.DefaultCPU = DefaultCPU
	}
	if c.DefaultMemory <= 0 {
		c.DefaultMemory = DefaultMemoryMB
	}
	if c.DefaultDisk <= 0 {
		c.DefaultDisk = DefaultDiskMB
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.PoolIdle <= 0 {
		c.PoolIdle = DefaultPoolIdle
	}
	if c.diskSpace == nil {
		c.diskSpace = diskSpace
	}
	r := &c.StepResources
	r.CPUCount = cmp.Or(r.CPUCount, DefaultStepCPU)
	r.MemoryMB = cmp.Or(r.MemoryMB, DefaultStepMemoryMB)
	r.DiskSizeMB = cmp.Or(r.DiskSizeMB, DefaultStepDiskMB)
}

// CreateRequest is a create call after the API decoded and defaulted it.
type CreateRequest struct {
	// ID, when set, is the new sandbox's ID instead of a fresh one (a
	// node of cluster mode gives its sandboxes their Sandbox objects'
	// names, by which clients route to them); it must be routable
	// (RoutableID). A member's ID is fixed when it boots, so such a create
	// takes the warm pool member of that ID (which PoolStatus.IDs names)
	// or none.
	ID string
	// Template names a template, or a snapshot (snapshot.go).
	Template  string
	Timeout   time.Duration
	Metadata  map[string]string
	EnvVars   map[string]string
	AutoPause bool
	// AutoPauseFiles: the timeout's pause keeps the file system only
	// (E2B's autoPauseMemory false); only with AutoPause.
	AutoPauseFiles bool
	// AutoResume: traffic through the router resumes the sandbox while it
	// is paused; not with AutoPauseFiles.
	AutoResume          bool
	Secure              bool // our servers besides envd require the access token too
	AllowInternetAccess *bool
	Network             []byte // opaque JSON kept for getInfo
	// VolumeMounts are the volumes to mount, by name (volumes.go).
	VolumeMounts []store.VolumeMount
}

// Metric is one sample for GET /sandboxes/{id}/metrics.
type Metric struct {
	Timestamp  time.Time
	CPUCount   int
	CPUUsedPct float64
	MemUsed    uint64
	MemTotal   uint64
	MemCache   uint64
	DiskUsed   uint64
	DiskTotal  uint64
}

// Manager owns every sandbox of this server.
type Manager struct {
	cfg Config
	log *slog.Logger

	stop chan struct{} // closed by Close
	wg   sync.WaitGroup
	// logsPurgedAt is when purgeLogs last ran, in unix nanoseconds.
	logsPurgedAt atomic.Int64

	kicks chan struct{} // wakes the pool loop
	// poolsChanged says a pool's ready members changed (PoolsChanged).
	poolsChanged chan struct{}

	// backends are Config.Backend and OtherBackends by name; read-only.
	backends map[string]isolation.Backend

	// snapMu serializes the removal of snapshots with their use: it
	// guards pins, the snapshots in use by creates in flight.
	snapMu sync.Mutex
	pins   map[string]int

	// tmplMu guards tmplUse, the template names creates in flight hold
	// (templates.go), and deleting, those being deleted.
	tmplMu   sync.Mutex
	tmplUse  map[string]int
	deleting map[string]bool

	mu        sync.Mutex // guards the fields below and those of the pools
	sandboxes map[string]*sandbox
	pools     map[string]*pool // by template name
	pending   int              // slots held by creates in flight and pool members
	steps     map[string]bool  // IDs of the build step sandboxes running (RunStep)
	started   bool
	closed    bool
}

// sandbox is the in-memory side of one live (running or paused) sandbox.
type sandbox struct {
	id      string
	log     *slog.Logger
	backend isolation.Backend // the one that started it
	cpus    int               // for metrics when the backend does not say
	ingress Ingress           // from the network config; never changes
	// The lifecycle policy, from the create: never changes.
	autoPause      bool
	autoPauseFiles bool
	autoResume     bool
	timeout        time.Duration // create-time, for a resume by traffic
	volumes        []store.VolumeMount

	// op serializes lifecycle transitions; it is held across store writes
	// and backend calls.
	op sync.Mutex

	mu sync.Mutex // guards the fields below; never held across I/O
	// inst is the running instance, or parked while the sandbox is
	// paused with nothing running (pause.go); it changes under op too.
	inst     isolation.Instance
	state    store.State
	pausedAs store.PauseKind
	endAt    time.Time
	pausedAt time.Time // when it was paused; zero while running
	expiring bool      // an expiry or a move to disk is in flight
	epoch    uint64    // bumped whenever tracked connections are dropped
	conns    map[*trackedConn]struct{}
	metrics  ring
	oomKills uint64 // as last sampled

	// guestLogMu guards what collectGuestLog read of guestLogOf's guest
	// log: up to guestLogAt (logs.go).
	guestLogMu sync.Mutex
	guestLogOf isolation.Instance
	guestLogAt int64
}

// instance returns sb's current instance.
func (sb *sandbox) instance() isolation.Instance {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.inst
}

// New returns a manager; call Start to reconcile and begin background work.
func New(cfg Config) (*Manager, error) {
	var errs []error
	if cfg.Store == nil {
		errs = append(errs, errors.New("no store"))
	}
	if cfg.Backend == nil {
		errs = append(errs, errors.New("no isolation backend"))
	}
	if cfg.Templates == nil {
		errs = append(errs, errors.New("no templates"))
	}
	backends := map[string]isolation.Backend{}
	for _, b := range append([]isolation.Backend{cfg.Backend}, cfg.OtherBackends...) {
		if b == nil {
			continue
		}
		if backends[b.Name()] != nil {
			errs = append(errs, fmt.Errorf("two backends named %q", b.Name()))
		}
		backends[b.Name()] = b
	}
	for tmpl, name := range cfg.TemplateBackends {
		if backends[name] == nil {
			errs = append(errs, fmt.Errorf("template %s: no backend %q on this server", tmpl, name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("configuring sandbox manager: %w", err)
	}
	cfg.setDefaults()
	return &Manager{
		cfg:          cfg,
		backends:     backends,
		log:          cfg.Log,
		stop:         make(chan struct{}),
		kicks:        make(chan struct{}, 1),
		poolsChanged: make(chan struct{}, 1),
		sandboxes:    map[string]*sandbox{},
		steps:        map[string]bool{},
		pins:         map[string]int{},
		tmplUse:      map[string]int{},
		deleting:     map[string]bool{},
		pools:        newPools(cfg.WarmPools, cfg.Now()),
	}, nil
}

// Start reconciles with the store (adopts live sandboxes, cleans up the rest
// and anything no record mentions) and starts the timeout and metrics loops.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	if m.started || m.closed {
		m.mu.Unlock()
		return errors.New("starting sandbox manager: already started or closed")
	}
	m.started = true
	m.mu.Unlock()
	if err := m.reconcile(ctx); err != nil {
		return fmt.Errorf("starting sandbox manager: %w", err)
	}
	m.goroutine(m.purgeLogs)
	m.goroutine(m.timeoutLoop)
	m.goroutine(m.metricsLoop)
	if len(m.pools) > 0 {
		m.goroutine(m.poolLoop)
	}
	return nil
}

// Close stops background work and discards the warm pools' members, then
// closes each backend that has background work of its own (an io.Closer).
// Running sandboxes keep running and are adopted by the next server.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	close(m.stop)
	m.mu.Unlock()
	m.wg.Wait()
	m.drainPools()
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(m.backends)) {
		if c, ok := m.backends[name].(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

// goroutine runs f in a goroutine that Close waits for, unless the manager
// is closed already; it reports whether it did.
func (m *Manager) goroutine(f func()) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		f()
	}()
	return true
}

// background runs f in a goroutine that Close waits for, or at once once
// the manager is closed: work that must be done, off the caller's path.
func (m *Manager) background(f func()) {
	if !m.goroutine(f) {
		f()
	}
}

// Get returns a running or paused sandbox (ErrNotFound otherwise).
func (m *Manager) Get(ctx context.Context, id string) (store.Sandbox, error) {
	sb, err := m.cfg.Store.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return store.Sandbox{}, notFound(id)
	}
	if err != nil {
		return store.Sandbox{}, err
	}
	if sb.State != store.StateRunning && sb.State != store.StatePaused {
		return store.Sandbox{}, ended(sb)
	}
	return sb, nil
}

// List lists sandboxes (see store.ListQuery). Only running and paused
// sandboxes are ever listed: other states in q.States are ignored.
func (m *Manager) List(ctx context.Context, q store.ListQuery) ([]store.Sandbox, string, error) {
	if len(q.States) > 0 {
		var states []store.State
		for _, s := range q.States {
			if s == store.StateRunning || s == store.StatePaused {
				states = append(states, s)
			}
		}
		if len(states) == 0 {
			return []store.Sandbox{}, "", nil
		}
		q.States = states
	}
	out, next, err := m.cfg.Store.ListSandboxes(ctx, q)
	switch {
	case errors.Is(err, store.ErrInvalidToken):
		return nil, "", &userError{kind: ErrInvalid, msg: "invalid nextToken", cause: err}
	case errors.Is(err, store.ErrInvalid):
		return nil, "", &userError{kind: ErrInvalid, msg: err.Error(), cause: err}
	}
	return out, next, err
}

// lookup returns the live sandbox id, or ErrNotFound.
func (m *Manager) lookup(id string) (*sandbox, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb := m.sandboxes[id]
	if sb == nil {
		return nil, notFound(id)
	}
	return sb, nil
}

// newSandbox is the in-memory side of a live sandbox whose record is rec,
// started by backend.
func (m *Manager) newSandbox(rec store.Sandbox, backend isolation.Backend, inst isolation.Instance, log *slog.Logger) *sandbox {
	sb := &sandbox{
		id:             rec.ID,
		log:            log,
		backend:        backend,
		inst:           inst,
		cpus:           rec.CPUCount,
		ingress:        ingressOf(rec),
		state:          rec.State,
		pausedAs:       rec.PausedAs,
		endAt:          rec.EndAt,
		autoPause:      rec.AutoPause,
		autoPauseFiles: rec.AutoPauseFiles,
		autoResume:     rec.AutoResume,
		timeout:        rec.Timeout,
		volumes:        rec.VolumeMounts,
		conns:          map[*trackedConn]struct{}{},
		metrics:        newRing(m.ringSize()),
	}
	if rec.State == store.StatePaused {
		// Adopted paused: the record was last written by the pause (or a
		// later timeout change, which only keeps it longer).
		sb.pausedAt = rec.UpdatedAt
	}
	return sb
}

// Ingress is what a sandbox's record says about requests to its ports
// other than envd's (envd checks its own token).
type Ingress struct {
	// AccessToken, when set (a secure sandbox), must arrive in
	// X-Access-Token on the ports of our in-sandbox servers.
	AccessToken string
	// TrafficToken, when set, must arrive in e2b-traffic-access-token (the
	// sandbox was created with allowPublicTraffic: false).
	TrafficToken string
	// MaskRequestHost, when set, replaces the Host header; "${PORT}" in it
	// becomes the target port.
	MaskRequestHost string
}

// Ingress returns the access and traffic tokens and Host mask of a live
// sandbox (the router's IngressPolicies). It reads memory only: the router
// calls it on every request to a user port.
func (m *Manager) Ingress(id string) (Ingress, error) {
	sb, err := m.lookup(id)
	if err != nil {
		return Ingress{}, err
	}
	return sb.ingress, nil
}

// ingressOf reads the inbound side of rec: its network config (Create
// validated the JSON, so a decoding error leaves the mask empty) and, if
// it is secure, its access token.
func ingressOf(rec store.Sandbox) Ingress {
	var n struct {
		MaskRequestHost string `json:"maskRequestHost"`
	}
	if len(rec.Network) > 0 {
		_ = json.Unmarshal(rec.Network, &n)
	}
	in := Ingress{TrafficToken: rec.TrafficAccessToken, MaskRequestHost: n.MaskRequestHost}
	if rec.Secure {
		in.AccessToken = rec.EnvdAccessToken
	}
	return in
}

// Count is how many sandboxes are live, pool members not included.
func (m *Manager) Count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sandboxes)
}

// live returns every live sandbox.
func (m *Manager) live() []*sandbox {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*sandbox, 0, len(m.sandboxes))
	for _, sb := range m.sandboxes {
		out = append(out, sb)
	}
	return out
}

// register makes sb live and watches its instance for death.
func (m *Manager) register(sb *sandbox) {
	m.mu.Lock()
	m.sandboxes[sb.id] = sb
	m.mu.Unlock()
	inst := sb.instance()
	m.goroutine(func() { m.watch(sb, inst) })
}

// forget removes sb from the live set.
func (m *Manager) forget(sb *sandbox) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sandboxes[sb.id] == sb {
		delete(m.sandboxes, sb.id)
	}
}

// userError is an error whose text is meant for the API caller; it wraps
// one of the sentinels and, optionally, the error that caused it.
type userError struct {
	kind  error
	msg   string
	cause error
}

func (e *userError) Error() string { return e.msg }

func (e *userError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.kind}
	}
	return []error{e.kind, e.cause}
}

func notFound(id string) error {
	return &userError{kind: ErrNotFound, msg: fmt.Sprintf("sandbox %q not found", id)}
}

// EndedError is the ErrNotFound of a sandbox that existed and has ended; it
// says when and why (timeout, killed, oom, …).
type EndedError struct {
	ID     string
	At     time.Time
	Reason string
}

// Error implements error.
func (e *EndedError) Error() string {
	return fmt.Sprintf("sandbox %q not found: it ended at %s (%s)", e.ID, e.At.UTC().Format(time.RFC3339), e.Detail())
}

// Detail is the reason, or says that none was recorded.
func (e *EndedError) Detail() string {
	reason := e.Reason
	if reason == "" {
		reason = "no reason recorded"
	}
	return reason
}

// Unwrap makes EndedError match ErrNotFound.
func (e *EndedError) Unwrap() error { return ErrNotFound }

func ended(sb store.Sandbox) error {
	return &EndedError{ID: sb.ID, At: sb.UpdatedAt, Reason: sb.Reason}
}

func invalid(format string, args ...any) error {
	return &userError{kind: ErrInvalid, msg: fmt.Sprintf(format, args...)}
}

// backendFor is the backend that starts tmpl's sandboxes.
func (m *Manager) backendFor(tmpl *template.Template) isolation.Backend {
	if name, ok := m.cfg.TemplateBackends[tmpl.Name]; ok {
		return m.backends[name]
	}
	return m.cfg.Backend
}

// cannot is the ErrInvalid of a request that the sandbox's backend cannot
// carry out (Capabilities), naming the backend.
func cannot(backend isolation.Backend, what string) error {
	return invalid("the %s backend cannot %s", backend.Name(), what)
}

func conflict(format string, args ...any) error {
	return &userError{kind: ErrConflict, msg: fmt.Sprintf(format, args...)}
}

// checkTimeout validates a create, connect or set-timeout duration
// against the server's limit.
func (m *Manager) checkTimeout(d time.Duration) error {
	if d <= 0 {
		return invalid("Timeout must be greater than 0 seconds")
	}
	return CheckTimeoutLimit(d, m.cfg.MaxTimeout, "")
}

// CheckTimeoutLimit refuses a timeout d beyond max (an ErrInvalid in E2B's
// words, with whose limit it is when whose is set); max 0 or
// NoTimeoutLimit is none.
func CheckTimeoutLimit(d, max time.Duration, whose string) error {
	if max <= 0 || d <= max {
		return nil
	}
	limit := fmt.Sprintf("%d seconds", max/time.Second)
	if max%time.Hour == 0 {
		limit = fmt.Sprintf("%d hours", max/time.Hour)
	}
	if whose != "" {
		return invalid("Timeout cannot be greater than %s (%s)", limit, whose)
	}
	return invalid("Timeout cannot be greater than %s", limit)
}
