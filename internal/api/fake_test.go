package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agent-sandbox/agent-sandbox/gen/filesystem"

	"github.com/agent-sandbox/agent-sandbox/internal/egress"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// The manager is what the server wires in.
var _ Sandboxes = (*sandbox.Manager)(nil)

// The store is what the server wires in.
var (
	_ Keys    = (*store.Store)(nil)
	_ APIKeys = (*store.Store)(nil)
)

// fakeSandboxes is a hand-written Sandboxes keeping sandboxes in a map.
type fakeSandboxes struct {
	mu     sync.Mutex
	sbs    map[string]store.Sandbox
	nextID int
	fail   error // returned by every call when set
	// execOK makes Exec succeed with no output, as a desktop sandbox's
	// commands do; execs records what it ran.
	execOK bool
	execs  [][]string
	// devTools is the address a dial of port 9222 reaches (a fake
	// Chromium); empty: the sandboxes listen on no port.
	devTools string
	created  []sandbox.CreateRequest
	// timeouts records SetTimeout and Connect durations by sandbox.
	timeouts map[string][]time.Duration
	queries  []store.ListQuery
	// pages are returned by List in turn (then empty); the token of each
	// but the last is "page<N+1>".
	pages   [][]store.Sandbox
	metrics []sandbox.Metric
	// metricWindows records the Metrics windows asked for.
	metricWindows [][2]time.Time
	// logs is every sandbox's log; logQueries records the Logs queries.
	logs       []store.SandboxLog
	logQueries []store.SandboxLogQuery
	// networkUpdates records UpdateNetwork calls; events is the audit trail.
	networkUpdates []sandbox.NetworkUpdate
	events         []egress.Event
	// reboots and pauses record Connect's reboot and Pause's keepMemory.
	reboots []bool
	pauses  []bool
	// forks records Fork's timeout and count; snapshots are what
	// CreateSnapshot made (listed newest last), deleted what
	// DeleteSnapshot was asked for.
	forks     [][2]int
	snapshots []store.Snapshot
	deleted   []string
	// templateUsers, when set, is what DeleteTemplate finds running over
	// a template (it then refuses, as the manager does).
	templateUsers string
	// files is every sandbox's files by absolute path, under /home/user.
	files map[string][]byte
}

func newFake(sbs ...store.Sandbox) *fakeSandboxes {
	f := &fakeSandboxes{sbs: map[string]store.Sandbox{}, timeouts: map[string][]time.Duration{}}
	for _, sb := range sbs {
		f.sbs[sb.ID] = sb
	}
	return f
}

func (f *fakeSandboxes) Create(ctx context.Context, req sandbox.CreateRequest) (store.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return store.Sandbox{}, f.fail
	}
	if req.Template == "missing" {
		return store.Sandbox{}, fmt.Errorf("template %q not found: %w", req.Template, sandbox.ErrInvalid)
	}
	f.created = append(f.created, req)
	f.nextID++
	sb := store.Sandbox{
		ID:         fmt.Sprintf("isb%d", f.nextID),
		TemplateID: "tpl" + req.Template,
		Alias:      req.Template,
		State:      store.StateRunning,
		StartedAt:  testNow,
		EndAt:      testNow.Add(req.Timeout),
		Metadata:   req.Metadata,
		// As the manager does: a token whatever Secure says.
		EnvdAccessToken: "tok",
		Secure:          req.Secure,
	}
	f.sbs[sb.ID] = sb
	return sb, nil
}

func (f *fakeSandboxes) Get(ctx context.Context, id string) (store.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return store.Sandbox{}, f.fail
	}
	sb, ok := f.sbs[id]
	if !ok {
		return store.Sandbox{}, fmt.Errorf("getting %s: %w", id, sandbox.ErrNotFound)
	}
	return sb, nil
}

func (f *fakeSandboxes) List(ctx context.Context, q store.ListQuery) ([]store.Sandbox, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return nil, "", f.fail
	}
	f.queries = append(f.queries, q)
	n := len(f.queries) - 1
	if n >= len(f.pages) {
		return []store.Sandbox{}, "", nil
	}
	next := ""
	if n < len(f.pages)-1 {
		next = fmt.Sprintf("page%d", n+1)
	}
	return f.pages[n], next, nil
}

func (f *fakeSandboxes) Kill(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	if _, ok := f.sbs[id]; !ok {
		return sandbox.ErrNotFound
	}
	delete(f.sbs, id)
	return nil
}

func (f *fakeSandboxes) SetTimeout(ctx context.Context, id string, d time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	if _, ok := f.sbs[id]; !ok {
		return sandbox.ErrNotFound
	}
	if d > 24*time.Hour {
		return fmt.Errorf("timeout cannot be greater than 24 hours: %w", sandbox.ErrInvalid)
	}
	f.timeouts[id] = append(f.timeouts[id], d)
	return nil
}

func (f *fakeSandboxes) Connect(ctx context.Context, id string, d time.Duration, reboot bool) (store.Sandbox, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return store.Sandbox{}, false, f.fail
	}
	sb, ok := f.sbs[id]
	if !ok {
		return store.Sandbox{}, false, sandbox.ErrNotFound
	}
	f.timeouts[id] = append(f.timeouts[id], d)
	f.reboots = append(f.reboots, reboot)
	resumed := sb.State == store.StatePaused
	sb.State = store.StateRunning
	f.sbs[id] = sb
	return sb, resumed, nil
}

func (f *fakeSandboxes) Pause(ctx context.Context, id string, keepMemory bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	f.pauses = append(f.pauses, keepMemory)
	sb, ok := f.sbs[id]
	if !ok {
		return sandbox.ErrNotFound
	}
	if sb.State == store.StatePaused {
		return fmt.Errorf("sandbox %s is already paused: %w", id, sandbox.ErrConflict)
	}
	sb.State = store.StatePaused
	f.sbs[id] = sb
	return nil
}

func (f *fakeSandboxes) Exec(ctx context.Context, id string, env map[string]string, args ...string) ([]byte, error) {
	if err := f.reachable(id); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.execOK {
		f.execs = append(f.execs, args)
		return nil, nil
	}
	return nil, &sandbox.ExecError{Args: args, Code: 127, Stderr: args[0] + ": command not found"}
}

// reachable is what Exec and Dial answer for a sandbox that is not
// running: ErrNotFound or ErrPaused.
func (f *fakeSandboxes) reachable(id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.sbs[id]
	switch {
	case !ok:
		return sandbox.ErrNotFound
	case sb.State == store.StatePaused:
		return sandbox.ErrPaused
	}
	return nil
}

// Dial implements browser.Dialer: the fake's sandboxes listen on no port
// but DevTools', if f.devTools is set.
func (f *fakeSandboxes) Dial(ctx context.Context, id string, port int) (net.Conn, error) {
	if err := f.reachable(id); err != nil {
		return nil, err
	}
	if port == 9222 && f.devTools != "" {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", f.devTools)
	}
	return nil, fmt.Errorf("dialing port %d of sandbox %s: %w", port, id, isolation.ErrPortClosed)
}

func (f *fakeSandboxes) Logs(ctx context.Context, id string, q store.SandboxLogQuery) ([]store.SandboxLog, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.sbs[id]; !ok {
		return nil, sandbox.ErrNotFound
	}
	f.logQueries = append(f.logQueries, q)
	return f.logs, nil
}

func (f *fakeSandboxes) Metrics(ctx context.Context, id string, start, end time.Time) ([]sandbox.Metric, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return nil, f.fail
	}
	if _, ok := f.sbs[id]; !ok {
		return nil, sandbox.ErrNotFound
	}
	f.metricWindows = append(f.metricWindows, [2]time.Time{start, end})
	var out []sandbox.Metric
	for _, m := range f.metrics {
		if !m.Timestamp.Before(start) && !m.Timestamp.After(end) {
			out = append(out, m)
		}
	}
	return out, nil
}

func (f *fakeSandboxes) UpdateNetwork(ctx context.Context, id string, u sandbox.NetworkUpdate) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	if _, ok := f.sbs[id]; !ok {
		return sandbox.ErrNotFound
	}
	f.networkUpdates = append(f.networkUpdates, u)
	return nil
}

func (f *fakeSandboxes) EgressEvents(id string, after uint64, limit int) ([]egress.Event, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return nil, 0, f.fail
	}
	if _, ok := f.sbs[id]; !ok {
		return nil, 0, sandbox.ErrNotFound
	}
	var out []egress.Event
	next := after
	for _, e := range f.events {
		if e.Seq > after && len(out) < limit {
			out = append(out, e)
			next = e.Seq
		}
	}
	return out, next, nil
}

// Fork makes count running copies of id; a count of 3 fails the second
// with ErrLimit, as a server at its limit would.
func (f *fakeSandboxes) Fork(ctx context.Context, id string, timeout time.Duration, count int) ([]sandbox.ForkResult, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return nil, "", f.fail
	}
	if _, ok := f.sbs[id]; !ok {
		return nil, "", sandbox.ErrNotFound
	}
	if count < 1 || count > sandbox.MaxForks {
		return nil, "", &testError{msg: fmt.Sprintf("count %d", count), kind: sandbox.ErrInvalid}
	}
	f.forks = append(f.forks, [2]int{int(timeout / time.Second), count})
	out := make([]sandbox.ForkResult, count)
	for i := range out {
		if count == 3 && i == 1 {
			out[i].Err = &testError{msg: "this server runs its maximum of 2 sandboxes; kill one first", kind: sandbox.ErrLimit}
			continue
		}
		f.nextID++
		sb := running(fmt.Sprintf("isf%d", f.nextID))
		f.sbs[sb.ID] = sb
		out[i].Sandbox = sb
	}
	return out, sandbox.ModeFilesystem, nil
}

func (f *fakeSandboxes) CreateSnapshot(ctx context.Context, id string, req sandbox.SnapshotRequest) (store.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.sbs[id]; !ok {
		return store.Snapshot{}, sandbox.ErrNotFound
	}
	name, tag, _ := strings.Cut(req.Name, ":")
	if tag == "" {
		tag = store.DefaultTag
	}
	sn := store.Snapshot{ID: fmt.Sprintf("ssn%d", len(f.snapshots)+1), Name: name, Tag: tag, Listed: true, Kind: "files", SandboxID: id}
	f.snapshots = append(f.snapshots, sn)
	return sn, nil
}

// ListSnapshots pages the snapshots one at a time, newest first, when
// q.Limit is 1; the token is the index of the next.
func (f *fakeSandboxes) ListSnapshots(ctx context.Context, q sandbox.SnapshotQuery) ([]store.Snapshot, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var all []store.Snapshot
	for _, sn := range slices.Backward(f.snapshots) {
		if q.SandboxID == "" || sn.SandboxID == q.SandboxID {
			all = append(all, sn)
		}
	}
	start := 0
	if q.NextToken != "" {
		n, err := strconv.Atoi(q.NextToken)
		if err != nil {
			return nil, "", &testError{msg: "Invalid next token", kind: sandbox.ErrInvalid}
		}
		start = n
	}
	end := len(all)
	if q.Limit > 0 {
		end = min(start+q.Limit, len(all))
	}
	next := ""
	if end < len(all) {
		next = strconv.Itoa(end)
	}
	return append([]store.Snapshot{}, all[start:end]...), next, nil
}

func (f *fakeSandboxes) DeleteTemplate(ctx context.Context, name string, remove func(context.Context) error) error {
	f.mu.Lock()
	users := f.templateUsers
	f.mu.Unlock()
	if users != "" {
		return &testError{msg: fmt.Sprintf("cannot delete template '%s' because there are running or paused sandboxes using it (%s); kill them first", name, users), kind: sandbox.ErrInvalid}
	}
	return remove(ctx)
}

func (f *fakeSandboxes) DeleteSnapshot(ctx context.Context, ref string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = append(f.deleted, ref)
	if ref == "busy:default" {
		return &testError{msg: "cannot delete template 'busy:default' because there are running sandboxes using it", kind: sandbox.ErrInvalid}
	}
	if !strings.HasPrefix(ref, "ssn") && !strings.HasPrefix(ref, "named") {
		return &testError{msg: fmt.Sprintf("snapshot '%s' not found", ref), kind: sandbox.ErrNotFound}
	}
	return nil
}

// OpenTerminal implements Sandboxes; the fake has no shells.
func (f *fakeSandboxes) OpenTerminal(ctx context.Context, id string, cols, rows uint32) (*sandbox.Terminal, error) {
	return nil, errors.ErrUnsupported
}

// ListDir implements Sandboxes over files: "~" is /home/user.
func (f *fakeSandboxes) ListDir(ctx context.Context, id, p string) (sandbox.Directory, error) {
	if err := f.reachable(id); err != nil {
		return sandbox.Directory{}, err
	}
	dir := path.Clean(strings.Replace(p, "~", "/home/user", 1))
	f.mu.Lock()
	defer f.mu.Unlock()
	out := sandbox.Directory{Path: dir}
	for name, content := range f.files {
		if path.Dir(name) == dir {
			out.Entries = append(out.Entries, &filesystem.EntryInfo{Name: path.Base(name), Path: name, Type: filesystem.FileType_FILE_TYPE_FILE, Size: int64(len(content))})
		}
	}
	if dir != "/home/user" && len(out.Entries) == 0 {
		return sandbox.Directory{}, fmt.Errorf("%w: %s", sandbox.ErrNoFile, p)
	}
	return out, nil
}

// ReadFile implements Sandboxes over files.
func (f *fakeSandboxes) ReadFile(ctx context.Context, id, p string) (io.ReadCloser, error) {
	if err := f.reachable(id); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	content, ok := f.files[p]
	if !ok {
		return nil, fmt.Errorf("%w: %s", sandbox.ErrNoFile, p)
	}
	return io.NopCloser(bytes.NewReader(content)), nil
}

// WriteFile implements Sandboxes over files.
func (f *fakeSandboxes) WriteFile(ctx context.Context, id, p string, r io.Reader) error {
	if err := f.reachable(id); err != nil {
		return err
	}
	content, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.files == nil {
		f.files = map[string][]byte{}
	}
	f.files[p] = content
	return nil
}

// Host implements Sandboxes: the fake's sandboxes by state, on a host of
// 4 CPUs with a cap of 10, each sandbox running on 2, and a pool of base.
func (f *fakeSandboxes) Host() (sandbox.HostStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := sandbox.HostStatus{
		States: map[store.State]int{}, MaxSandboxes: 10, HostCPUs: 4, DefaultBackend: "fake", Backends: []string{"fake"}, SandboxesByBackend: map[string]int{},
		Pools: map[string]sandbox.PoolStatus{"base": {Ready: 1, Filling: 1, Target: 2}},
	}
	for _, sb := range f.sbs {
		h.States[sb.State]++
		h.SandboxesByBackend["fake"]++
		if sb.State == store.StateRunning {
			h.CPUs += 2
		}
	}
	return h, nil
}
