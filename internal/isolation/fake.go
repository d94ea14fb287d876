package isolation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/network"
)

// Fake is an in-memory Backend for the manager's unit tests. Sandboxes are
// records; Dial reaches http.Handlers served over in-memory pipes (no
// sockets), per port. The zero value is not usable; call NewFake.
type Fake struct {
	mu sync.Mutex // guards every field below and the fields of its FakeInstances
	// handlers serve these ports in every sandbox started afterwards.
	handlers  map[int]http.Handler
	startErr  error
	links     bool // sandboxes report a network Link
	sandboxes map[string]*FakeInstance
	name      string
	caps      Capabilities
	guestLogs string // directory of the instances' guest logs; "": none
}

var _ Backend = (*Fake)(nil)

// NewFake returns an empty fake backend named "fake" that can pause.
func NewFake() *Fake {
	return &Fake{handlers: map[int]http.Handler{}, sandboxes: map[string]*FakeInstance{}, name: "fake", caps: Capabilities{Pause: true}}
}

// NewFakeNamed returns an empty fake backend with the given name and
// capabilities, for tests of a manager with several backends. With
// caps.Export it still refuses layers and export: it has no file system.
func NewFakeNamed(name string, caps Capabilities) *Fake {
	f := NewFake()
	f.name, f.caps = name, caps
	return f
}

// Handle makes port answer with h in every sandbox started from now on
// (e.g. a fake envd on 49983).
func (f *Fake) Handle(port int, h http.Handler) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handlers[port] = h
}

// KeepGuestLogs gives every sandbox started from now on a guest log
// (GuestLogger), the file <dir>/<id>.log, which the test writes.
func (f *Fake) KeepGuestLogs(dir string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.guestLogs = dir
}

// FailStarts makes Start return err (nil: succeed again).
func (f *Fake) FailStarts(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.startErr = err
}

// Instance returns the sandbox id, alive or not, or nil.
func (f *Fake) Instance(id string) *FakeInstance {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sandboxes[id]
}

// Running returns the IDs of sandboxes that are neither stopped nor exited.
func (f *Fake) Running() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for id, i := range f.sandboxes {
		if !i.ended() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// Name implements Backend.
func (f *Fake) Name() string { return f.name }

// Capabilities implements Backend.
func (f *Fake) Capabilities() Capabilities { return f.caps }

type fakeState struct {
	ID string `json:"id"`
}

// GiveLinks makes every sandbox started from now on report a network Link
// (host interface "fake-<n>", gateway 192.0.2.1, address 192.0.2.2), as a
// backend with networking does. Nothing is set up behind it.
func (f *Fake) GiveLinks() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.links = true
}

// Start implements Backend.
func (f *Fake) Start(ctx context.Context, spec Spec) (Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(spec.Layers) > 0 || spec.Export != "" {
		return nil, fmt.Errorf("starting sandbox %s: layers and export: %w", spec.ID, errors.ErrUnsupported)
	}
	if err := CheckVolumes(spec, f.caps); err != nil {
		return nil, fmt.Errorf("starting sandbox %s: %w", spec.ID, err)
	}
	if err := CheckSnapshot(spec, f.caps); err != nil {
		return nil, fmt.Errorf("starting sandbox %s: %w", spec.ID, err)
	}
	if spec.Snapshot != nil {
		if _, err := os.Stat(filepath.Join(spec.Snapshot.Dir, fakeSnapshotFile)); err != nil {
			return nil, fmt.Errorf("starting sandbox %s: reading the snapshot: %w", spec.ID, err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.startErr != nil {
		return nil, f.startErr
	}
	if old, ok := f.sandboxes[spec.ID]; ok && !old.ended() {
		return nil, fmt.Errorf("starting sandbox %s: already running", spec.ID)
	}
	i := &FakeInstance{f: f, spec: spec, done: make(chan struct{}), servers: map[int]*pipeListener{}}
	if f.links {
		i.link = network.Link{
			HostIf:  fmt.Sprintf("fake-%d", len(f.sandboxes)),
			Gateway: netip.MustParseAddr("192.0.2.1"),
			Address: netip.MustParseAddr("192.0.2.2"),
		}
	}
	for port, h := range f.handlers {
		i.serve(port, h)
	}
	f.sandboxes[spec.ID] = i
	return i, nil
}

// Adopt implements Backend: it returns the sandbox if it is still running.
func (f *Fake) Adopt(_ context.Context, id string, state json.RawMessage) (Instance, error) {
	var st fakeState
	if err := json.Unmarshal(state, &st); err != nil || st.ID != id {
		return nil, fmt.Errorf("adopting sandbox %s: %w: bad state", id, ErrGone)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.sandboxes[id]
	if i == nil || i.ended() {
		return nil, fmt.Errorf("adopting sandbox %s: %w", id, ErrGone)
	}
	return i, nil
}

// Cleanup implements Backend.
func (f *Fake) Cleanup(_ context.Context, id string, _ json.RawMessage) error {
	f.mu.Lock()
	i := f.sandboxes[id]
	f.mu.Unlock()
	if i != nil {
		return i.Stop(context.Background())
	}
	return nil
}

// FakeInstance is a sandbox of a Fake.
type FakeInstance struct {
	f       *Fake
	spec    Spec
	done    chan struct{}
	servers map[int]*pipeListener
	paused  bool
	stopped bool
	exit    Exit
	stats   Stats
	link    network.Link // set at Start, then read-only
}

var (
	_ Instance    = (*FakeInstance)(nil)
	_ GuestLogger = (*FakeInstance)(nil)
	_ Halter      = (*FakeInstance)(nil)
)

// GuestLog implements GuestLogger: <dir>/<id>.log of Fake.KeepGuestLogs,
// or "", which no file has.
func (i *FakeInstance) GuestLog() string {
	i.f.mu.Lock()
	defer i.f.mu.Unlock()
	if i.f.guestLogs == "" {
		return ""
	}
	return filepath.Join(i.f.guestLogs, i.spec.ID+".log")
}

// Spec returns the spec the sandbox was started with.
func (i *FakeInstance) Spec() Spec { return i.spec }

// Handle makes port of this sandbox answer with h (nil: close the port).
func (i *FakeInstance) Handle(port int, h http.Handler) {
	i.f.mu.Lock()
	defer i.f.mu.Unlock()
	if l := i.servers[port]; l != nil {
		l.Close()
		delete(i.servers, port)
	}
	if h != nil {
		i.serve(port, h)
	}
}

func (i *FakeInstance) serve(port int, h http.Handler) {
	l := newPipeListener()
	i.servers[port] = l
	go func() { _ = (&http.Server{Handler: h}).Serve(l) }()
}

// SetStats sets what Stats returns (Time is filled in).
func (i *FakeInstance) SetStats(s Stats) {
	i.f.mu.Lock()
	defer i.f.mu.Unlock()
	i.stats = s
}

// Crash ends the sandbox by itself, as if its init died: Done closes and
// Exit returns e.
func (i *FakeInstance) Crash(e Exit) {
	i.f.mu.Lock()
	defer i.f.mu.Unlock()
	if i.ended() {
		return
	}
	i.exit = e
	i.closeLocked()
}

// Paused reports whether the sandbox is paused.
func (i *FakeInstance) Paused() bool {
	i.f.mu.Lock()
	defer i.f.mu.Unlock()
	return i.paused
}

// Stopped reports whether Stop (or Cleanup) was called.
func (i *FakeInstance) Stopped() bool {
	i.f.mu.Lock()
	defer i.f.mu.Unlock()
	return i.stopped
}

func (i *FakeInstance) ended() bool {
	select {
	case <-i.done:
		return true
	default:
		return false
	}
}

func (i *FakeInstance) closeLocked() {
	for _, l := range i.servers {
		l.Close()
	}
	close(i.done)
}

// State implements Instance.
func (i *FakeInstance) State() json.RawMessage {
	b, _ := json.Marshal(fakeState{ID: i.spec.ID})
	return b
}

// Dial implements Instance over an in-memory pipe.
func (i *FakeInstance) Dial(ctx context.Context, port int) (net.Conn, error) {
	i.f.mu.Lock()
	l := i.servers[port]
	paused, ended := i.paused, i.ended()
	i.f.mu.Unlock()
	switch {
	case ended:
		return nil, fmt.Errorf("dialing port %d of sandbox %s: %w", port, i.spec.ID, ErrGone)
	case paused:
		return nil, fmt.Errorf("dialing port %d of sandbox %s: paused", port, i.spec.ID)
	case l == nil:
		return nil, fmt.Errorf("dialing port %d of sandbox %s: %w", port, i.spec.ID, ErrPortClosed)
	}
	return l.dial(ctx)
}

// fakeSnapshotFile is what a FakeInstance's Snapshot writes into its
// directory: the sandbox it saved and the kind.
const fakeSnapshotFile = "fake-snapshot.json"

type fakeSnapshot struct {
	From string       `json:"from"`
	Kind SnapshotKind `json:"kind"`
}

// Snapshot implements Instance: it writes which sandbox it saved, up to
// the Fake's Capabilities.Snapshot, and nothing else.
func (i *FakeInstance) Snapshot(_ context.Context, dir string, kind SnapshotKind) error {
	if kind == NoSnapshot || kind > i.f.caps.Snapshot {
		return fmt.Errorf("snapshotting sandbox %s: a %s snapshot: %w", i.spec.ID, kind, errors.ErrUnsupported)
	}
	i.f.mu.Lock()
	ended := i.ended()
	i.f.mu.Unlock()
	if ended {
		return fmt.Errorf("snapshotting sandbox %s: %w", i.spec.ID, ErrGone)
	}
	b, _ := json.Marshal(fakeSnapshot{From: i.spec.ID, Kind: kind})
	return os.WriteFile(filepath.Join(dir, fakeSnapshotFile), b, 0o600)
}

// SnapshotSource returns the sandbox whose snapshot a sandbox started
// from (Spec.Snapshot), with the kind it was saved as; "" when it started
// from its template.
func (i *FakeInstance) SnapshotSource() (from string, kind SnapshotKind, err error) {
	if i.spec.Snapshot == nil {
		return "", NoSnapshot, nil
	}
	b, err := os.ReadFile(filepath.Join(i.spec.Snapshot.Dir, fakeSnapshotFile))
	if err != nil {
		return "", NoSnapshot, err
	}
	var s fakeSnapshot
	err = json.Unmarshal(b, &s)
	return s.From, s.Kind, err
}

// Pause implements Instance.
func (i *FakeInstance) Pause(context.Context) error { return i.setPaused(true) }

// Resume implements Instance.
func (i *FakeInstance) Resume(context.Context) error { return i.setPaused(false) }

func (i *FakeInstance) setPaused(p bool) error {
	if !i.f.caps.Pause {
		return fmt.Errorf("pausing sandbox %s: %w", i.spec.ID, errors.ErrUnsupported)
	}
	i.f.mu.Lock()
	defer i.f.mu.Unlock()
	if i.ended() {
		return fmt.Errorf("sandbox %s: %w", i.spec.ID, ErrGone)
	}
	i.paused = p
	return nil
}

// Stats implements Instance.
func (i *FakeInstance) Stats(context.Context) (Stats, error) {
	i.f.mu.Lock()
	defer i.f.mu.Unlock()
	if i.ended() {
		return Stats{}, fmt.Errorf("sandbox %s: %w", i.spec.ID, ErrGone)
	}
	s := i.stats
	s.Time = time.Now()
	return s, nil
}

// Link implements Instance: the zero Link unless the Fake gives links.
func (i *FakeInstance) Link() network.Link { return i.link }

// Done implements Instance. Stop closes it too.
func (i *FakeInstance) Done() <-chan struct{} { return i.done }

// Exit implements Instance.
func (i *FakeInstance) Exit() Exit {
	i.f.mu.Lock()
	defer i.f.mu.Unlock()
	return i.exit
}

// Halt implements Halter: the sandbox ends as Stop ends it, but Stopped
// stays false until Stop.
func (i *FakeInstance) Halt(context.Context) error {
	i.f.mu.Lock()
	defer i.f.mu.Unlock()
	i.endLocked()
	return nil
}

// Stop implements Instance.
func (i *FakeInstance) Stop(context.Context) error {
	i.f.mu.Lock()
	defer i.f.mu.Unlock()
	i.stopped = true
	i.endLocked()
	return nil
}

// endLocked ends the sandbox as stopped, unless it has ended already.
func (i *FakeInstance) endLocked() {
	if !i.ended() {
		i.exit = Exit{Reason: "stopped"}
		i.closeLocked()
	}
}

// pipeListener is a net.Listener whose connections are net.Pipes.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) dial(ctx context.Context) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.closed:
		return nil, ErrPortClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }
