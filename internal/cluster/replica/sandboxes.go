package replica

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/agent-sandbox/agent-sandbox/internal/cluster/control"
	clusternode "github.com/agent-sandbox/agent-sandbox/internal/cluster/node"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/v1alpha1"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// DefaultStartTimeout bounds the wait for a node to report a new sandbox
// Running: a node builds a template it lacks on first use (minutes). The
// leader's Collector counts a sandbox not started by then as ended.
const DefaultStartTimeout = control.MaxStart

// killTimeout bounds a kill's wait for the node to kill the sandbox. The
// deletion stays after it: the node completes it when it can, or the
// leader when the node's Lease expires.
const killTimeout = 30 * time.Second

// Config is a Sandboxes'.
type Config struct {
	Namespace string
	Cache     *control.Cache
	Placer    *control.Placer
	// BuiltIn are the templates every node builds on first use: a create
	// may name one that no node has built yet.
	BuiltIn []string
	// StartTimeout bounds a create's wait for Running (default
	// DefaultStartTimeout, which is also the most).
	StartTimeout time.Duration
	Log          *slog.Logger
}

// Sandboxes is the E2B API's sandboxes as Sandbox objects. It implements
// the api package's Sandboxes.
type Sandboxes struct {
	cfg    Config
	client *rest.RESTClient // agent-sandbox.dev/v1alpha1
}

// New is the sandboxes of cfg.Namespace on kube's API server.
func New(kube *rest.Config, cfg Config) (*Sandboxes, error) {
	if cfg.Namespace == "" || cfg.Cache == nil || cfg.Placer == nil || cfg.Log == nil {
		return nil, errors.New("cluster sandboxes: namespace, cache, placer and log are required")
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.StartTimeout > control.MaxStart {
		return nil, fmt.Errorf("cluster sandboxes: start timeout %s: at most %s, after which the leader counts a sandbox not started as ended", cfg.StartTimeout, control.MaxStart)
	}
	client, err := v1alpha1.NewClient(kube)
	if err != nil {
		return nil, err
	}
	return &Sandboxes{cfg: cfg, client: client}, nil
}

// Create places the sandbox, writes its object (one API-server write) and
// waits until its node reports it Running. Placed where a warm pool
// member waits, the object is named by the member, which the node then
// hands out; a member gone meanwhile (another replica's create took it)
// costs a second object, under a fresh name, which the node boots.
func (s *Sandboxes) Create(ctx context.Context, req sandbox.CreateRequest) (store.Sandbox, error) {
	if err := supported(req); err != nil {
		return store.Sandbox{}, err
	}
	if err := sandbox.CheckRequest(req); err != nil {
		return store.Sandbox{}, err
	}
	if !s.known(req.Template) {
		return store.Sandbox{}, fmt.Errorf("%w: template %q not found on any node", sandbox.ErrInvalid, req.Template)
	}
	pl, release, err := s.cfg.Placer.Reserve(req.Template)
	if errors.Is(err, control.ErrNoNode) {
		return store.Sandbox{}, fmt.Errorf("%w: %v", sandbox.ErrLimit, err)
	} else if err != nil {
		return store.Sandbox{}, err
	}
	defer release()
	if pl.Warm != "" {
		sb, err := s.start(ctx, req, pl.Node, pl.Warm, release)
		if !errors.Is(err, errWarmGone) {
			return sb, err
		}
		s.cfg.Log.Info("a warm member named for a create was gone: booting one", "node", pl.Node, "member", pl.Warm, "err", err)
	}
	return s.start(ctx, req, pl.Node, sandbox.NewID(), release)
}

// errWarmGone is start's when the warm member that names the object was
// gone: another object has the name, or the node had handed the member
// out (it then refuses the ID as taken).
var errWarmGone = errors.New("the warm member is gone")

// start writes the object of req, called name, on node and waits for the
// node to report it Running; placed is called once the cache shows it.
func (s *Sandboxes) start(ctx context.Context, req sandbox.CreateRequest, node, name string, placed func()) (store.Sandbox, error) {
	obj := &v1alpha1.Sandbox{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Sandbox"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.cfg.Namespace, Finalizers: []string{v1alpha1.NodeFinalizer}},
		Spec: v1alpha1.SandboxSpec{
			Template: req.Template,
			Timeout:  metav1.Duration{Duration: req.Timeout},
			Metadata: req.Metadata,
			Node:     node,
			Secure:   req.Secure,
			EnvVars:  req.EnvVars,
			// What the node checks against its own limits (bandwidth,
			// an egress proxy) it refuses with its Error's class.
			AllowInternetAccess: req.AllowInternetAccess,
			Network:             req.Network,
		},
	}
	created := new(v1alpha1.Sandbox)
	if err := s.on(s.client.Post()).Body(obj).Do(ctx).Into(created); apierrors.IsAlreadyExists(err) {
		return store.Sandbox{}, fmt.Errorf("%w: Sandbox %s exists", errWarmGone, name)
	} else if err != nil {
		return store.Sandbox{}, fmt.Errorf("creating Sandbox %s on node %s: %w", obj.Name, node, err)
	}
	log := s.cfg.Log.With("sandbox_id", created.Name, "node", node)
	got, err := s.cfg.Cache.Await(ctx, created.Name, s.cfg.StartTimeout, func(o *v1alpha1.Sandbox) bool {
		placed() // the cache shows the object now: placement counts it
		return o.Deleting() || (o.Status.State != "" && o.Status.State != v1alpha1.SandboxPending)
	})
	if errors.Is(err, control.ErrDeleted) || (err == nil && got.Deleting()) {
		return store.Sandbox{}, fmt.Errorf("%w: sandbox %s was killed before node %s started it", sandbox.ErrConflict, created.Name, node)
	}
	if err != nil {
		// The create's context ended or the node is slow: the object
		// goes, so that no sandbox starts that nobody got the ID of.
		s.remove(context.WithoutCancel(ctx), created.Name, log)
		return store.Sandbox{}, fmt.Errorf("waiting for node %s to start sandbox %s: %w", node, created.Name, err)
	}
	if got.Status.State != v1alpha1.SandboxRunning {
		s.remove(context.WithoutCancel(ctx), created.Name, log)
		refused := clusternode.ClassError(got.Status.ErrorClass, got.Status.Reason)
		switch {
		case got.Status.State != v1alpha1.SandboxError || refused == nil:
			return store.Sandbox{}, fmt.Errorf("node %s could not start sandbox %s: %s: %s", node, created.Name, got.Status.State, got.Status.Reason)
		case got.Status.ErrorClass == v1alpha1.ErrorConflict:
			// The only conflict of a create: the ID is taken on the
			// node, which for a fresh one does not happen.
			return store.Sandbox{}, fmt.Errorf("%w: %w", errWarmGone, refused)
		}
		return store.Sandbox{}, refused
	}
	return view(got), nil
}

// supported refuses what cluster mode cannot do yet, rather than create a
// sandbox without it.
func supported(req sandbox.CreateRequest) error {
	switch {
	case req.AutoPause:
		return fmt.Errorf("%w: autoPause is not supported in cluster mode yet: a node does not report a sandbox that its timeout paused", sandbox.ErrInvalid)
	case len(req.VolumeMounts) > 0:
		return fmt.Errorf("%w: volumeMounts are not supported in cluster mode yet: a volume is one host's, and no node shares it", sandbox.ErrInvalid)
	}
	return nil
}

// known says whether some live node has template built, or every node
// builds it on first use.
func (s *Sandboxes) known(template string) bool {
	if slices.Contains(s.cfg.BuiltIn, template) {
		return true
	}
	for _, n := range s.cfg.Cache.Nodes() {
		if slices.Contains(n.Status.Templates, template) {
			return true
		}
	}
	return false
}

// Get reads the sandbox's object from the API server, not the cache: a
// client that created it through another replica finds it at once.
func (s *Sandboxes) Get(ctx context.Context, id string) (store.Sandbox, error) {
	o, err := s.get(ctx, id)
	if err != nil {
		return store.Sandbox{}, err
	}
	return view(o), nil
}

// get reads a live sandbox's object: an ended one is not found, as on a
// single host.
func (s *Sandboxes) get(ctx context.Context, id string) (*v1alpha1.Sandbox, error) {
	o := new(v1alpha1.Sandbox)
	err := s.on(s.client.Get()).Name(id).Do(ctx).Into(o)
	switch {
	case apierrors.IsNotFound(err):
		return nil, sandbox.ErrNotFound
	case err != nil:
		return nil, fmt.Errorf("reading Sandbox %s: %w", id, err)
	case o.Status.State.Ended():
		return nil, &sandbox.EndedError{ID: id, At: o.StatusTime(), Reason: cmp.Or(o.Status.Reason, string(o.Status.State))}
	case o.Deleting():
		return nil, &sandbox.EndedError{ID: id, At: o.DeletionTimestamp.Time, Reason: store.ReasonKilled}
	case overdue(o, time.Now()):
		return nil, &sandbox.EndedError{ID: id, At: view(o).EndAt, Reason: store.ReasonTimeout}
	}
	return o, nil
}

// overdue says whether o's sandbox has outlived its timeout while its node
// has not reported the kill yet (it checks once a second, then writes the
// status): a single host stops answering for a sandbox at its end, and so
// do the replicas.
func overdue(o *v1alpha1.Sandbox, now time.Time) bool {
	end, started := o.EndAt()
	return o.Status.State == v1alpha1.SandboxRunning && started && now.After(end)
}

// Kill deletes the object and waits until the deletion completes, which
// its node's finalizer holds until the node has killed the sandbox: as on
// a single host, nothing runs for it once the kill answers.
func (s *Sandboxes) Kill(ctx context.Context, id string) error {
	o, getErr := s.get(ctx, id)
	if getErr != nil && !errors.Is(getErr, sandbox.ErrNotFound) {
		return getErr
	}
	err := s.on(s.client.Delete()).Name(id).Do(ctx).Error()
	switch {
	case apierrors.IsNotFound(err):
		return sandbox.ErrNotFound
	case err != nil:
		return fmt.Errorf("deleting Sandbox %s: %w", id, err)
	case o == nil:
		return getErr // an ended sandbox's object, deleted: it was not live
	}
	_, err = s.cfg.Cache.Await(ctx, id, killTimeout, func(*v1alpha1.Sandbox) bool { return false })
	if errors.Is(err, control.ErrDeleted) {
		return nil
	}
	// The cache may have missed the object's whole life (a relist):
	// the API server decides.
	if gone := s.on(s.client.Get()).Name(id).Do(context.WithoutCancel(ctx)).Error(); apierrors.IsNotFound(gone) {
		return nil
	}
	return fmt.Errorf("sandbox %s is being killed, but its node %s has not confirmed the kill: %w", id, o.Spec.Node, err)
}

// SetTimeout makes the sandbox end d from now: its spec.timeout becomes
// the time from its status.startedAt to then, which its node applies.
func (s *Sandboxes) SetTimeout(ctx context.Context, id string, d time.Duration) error {
	o, err := s.get(ctx, id)
	if err != nil {
		return err
	}
	_, err = s.endAt(ctx, o, time.Now().Add(d), nil)
	return err
}

// Connect implements api.Sandboxes as a single host does: a running
// sandbox ends no sooner than d from now (a later end stays); a paused one
// is resumed by its node (spec.pause cleared) to end d from now.
func (s *Sandboxes) Connect(ctx context.Context, id string, d time.Duration, _ bool) (store.Sandbox, bool, error) {
	o, err := s.get(ctx, id)
	if err != nil {
		return store.Sandbox{}, false, err
	}
	endAt := time.Now().Add(d)
	if o.Status.State == v1alpha1.SandboxPaused {
		// Resumed by its node, to end d from now, as a single host does.
		if o, err = s.endAt(ctx, o, endAt, map[string]any{"pause": nil}); err != nil {
			return store.Sandbox{}, false, err
		}
		if err := s.nodeActed(ctx, o, v1alpha1.SandboxRunning, "resume"); err != nil {
			return store.Sandbox{}, false, err
		}
		if o, err = s.get(ctx, id); err != nil {
			return store.Sandbox{}, false, err
		}
		return view(o), true, nil
	}
	if o.Status.StartedAt == nil || endAt.After(view(o).EndAt) {
		if o, err = s.endAt(ctx, o, endAt, nil); err != nil {
			return store.Sandbox{}, false, err
		}
	}
	return view(o), false, nil
}

// endAt makes o's sandbox end at at (and patches the rest of spec into its
// spec too): its spec.timeout becomes the time from its status.startedAt
// (whole seconds) to at, which its node applies. It returns the object as
// patched.
func (s *Sandboxes) endAt(ctx context.Context, o *v1alpha1.Sandbox, at time.Time, spec map[string]any) (*v1alpha1.Sandbox, error) {
	if o.Status.StartedAt == nil {
		return nil, fmt.Errorf("%w: sandbox %s has not started yet", sandbox.ErrConflict, o.Name)
	}
	spec = maps.Clone(spec)
	if spec == nil {
		spec = make(map[string]any, 1)
	}
	spec["timeout"] = metav1.Duration{Duration: at.Sub(o.Status.StartedAt.Time).Round(time.Second)}
	return s.patchSpec(ctx, o.Name, spec)
}

// patchSpec merges spec into the spec of Sandbox name (a JSON merge patch:
// nil clears a field) and returns the object as patched.
func (s *Sandboxes) patchSpec(ctx context.Context, name string, spec map[string]any) (*v1alpha1.Sandbox, error) {
	body, err := json.Marshal(map[string]any{"spec": spec})
	if err != nil {
		return nil, fmt.Errorf("encoding the spec of Sandbox %s: %w", name, err)
	}
	patched := new(v1alpha1.Sandbox)
	err = s.on(s.client.Patch(types.MergePatchType)).Name(name).Body(body).Do(ctx).Into(patched)
	switch {
	case apierrors.IsNotFound(err):
		return nil, sandbox.ErrNotFound
	case err != nil:
		return nil, fmt.Errorf("changing the spec of Sandbox %s: %w", name, err)
	}
	return patched, nil
}

// Pause asks the sandbox's node to pause it (spec.pause) and waits until
// the node says it did, or why it could not; then the object no longer
// asks for it.
func (s *Sandboxes) Pause(ctx context.Context, id string, keepMemory bool) error {
	o, err := s.get(ctx, id)
	if err != nil {
		return err
	}
	if o.Status.State == v1alpha1.SandboxPaused || o.Spec.Pause != "" {
		return fmt.Errorf("%w: sandbox %q is already paused", sandbox.ErrConflict, id)
	}
	kind := v1alpha1.PauseFiles
	if keepMemory {
		kind = v1alpha1.PauseMemory
	}
	o, err = s.patchSpec(ctx, id, map[string]any{"pause": kind})
	if err == nil {
		err = s.nodeActed(ctx, o, v1alpha1.SandboxPaused, "pause")
	}
	if err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		if _, rerr := s.patchSpec(context.WithoutCancel(ctx), id, map[string]any{"pause": nil}); rerr != nil {
			s.cfg.Log.Warn("clearing the pause of a sandbox that did not pause", "sandbox_id", id, "err", rerr)
		}
	}
	return err
}

// nodeActed waits until the node has acted on o's generation (as patched)
// and answers nil when the sandbox is then in state want; else the node's
// refusal, in the class it gave.
func (s *Sandboxes) nodeActed(ctx context.Context, o *v1alpha1.Sandbox, want v1alpha1.SandboxState, what string) error {
	got, err := s.cfg.Cache.Await(ctx, o.Name, s.cfg.StartTimeout, func(c *v1alpha1.Sandbox) bool {
		return c.Status.ObservedGeneration >= o.Generation || c.Status.State.Ended() || c.Deleting()
	})
	switch {
	case errors.Is(err, control.ErrDeleted) || (err == nil && got.Deleting()):
		return sandbox.ErrNotFound
	case err != nil:
		return fmt.Errorf("waiting for node %s to %s sandbox %s: %w", o.Spec.Node, what, o.Name, err)
	case got.Status.State == want:
		return nil
	case got.Status.State.Ended():
		return &sandbox.EndedError{ID: o.Name, At: got.StatusTime(), Reason: cmp.Or(got.Status.Reason, string(got.Status.State))}
	}
	if refused := clusternode.ClassError(got.Status.ErrorClass, got.Status.Reason); refused != nil {
		return refused
	}
	return fmt.Errorf("node %s could not %s sandbox %s: %s", o.Spec.Node, what, o.Name, got.Status.Reason)
}

// List lists from the cache, as the store lists on a single host: the
// query's states (running and paused by default), metadata, template and
// start time, ordered by start time and ID, a page at a time.
func (s *Sandboxes) List(_ context.Context, q store.ListQuery) ([]store.Sandbox, string, error) {
	return list(s.cfg.Cache.Sandboxes(), q)
}

// list is one page of q over objs.
func list(objs []*v1alpha1.Sandbox, q store.ListQuery) ([]store.Sandbox, string, error) {
	after, err := decodeCursor(q.NextToken)
	if err != nil {
		return nil, "", err
	}
	states := q.States
	if len(states) == 0 {
		states = []store.State{store.StateRunning, store.StatePaused}
	}
	var out []store.Sandbox
	for _, o := range objs {
		sb := view(o)
		// A template by its ID or its name, as the store matches it.
		if !slices.Contains(states, sb.State) || (q.TemplateID != "" && sb.TemplateID != q.TemplateID && sb.Alias != q.TemplateID) ||
			sb.StartedAt.Truncate(time.Millisecond).Before(q.StartedAfter) || !hasMetadata(sb.Metadata, q.Metadata) {
			continue
		}
		out = append(out, sb)
	}
	desc := q.Order != store.OrderAsc
	compare := func(a, b store.Sandbox) int {
		c := cmp.Or(a.StartedAt.Compare(b.StartedAt), cmp.Compare(a.ID, b.ID))
		if desc {
			return -c
		}
		return c
	}
	slices.SortFunc(out, compare)
	if after != nil {
		i, _ := slices.BinarySearchFunc(out, *after, compare)
		for i < len(out) && compare(out[i], *after) <= 0 {
			i++
		}
		out = out[i:]
	}
	limit := q.Limit
	if limit == 0 {
		limit = store.DefaultListLimit
	}
	limit = min(max(limit, 1), store.MaxListLimit)
	if len(out) <= limit {
		return out, "", nil
	}
	out = out[:limit]
	return out, encodeCursor(out[limit-1]), nil
}

func hasMetadata(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// encodeCursor is a page token: the last sandbox listed, by start time and
// ID.
func encodeCursor(sb store.Sandbox) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(sb.StartedAt.UnixNano(), 10) + "/" + sb.ID))
}

func decodeCursor(token string) (*store.Sandbox, error) {
	if token == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return nil, store.ErrInvalidToken
	}
	ns, id, ok := strings.Cut(string(b), "/")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || id == "" {
		return nil, store.ErrInvalidToken
	}
	return &store.Sandbox{ID: id, StartedAt: time.Unix(0, n)}, nil
}

// remove deletes an object whose create failed.
func (s *Sandboxes) remove(ctx context.Context, name string, log *slog.Logger) {
	if err := s.on(s.client.Delete()).Name(name).Do(ctx).Error(); err != nil && !apierrors.IsNotFound(err) {
		log.Warn("deleting the Sandbox of a failed create", "err", err)
	}
}

// on points r at the namespace's Sandboxes.
func (s *Sandboxes) on(r *rest.Request) *rest.Request {
	return r.Namespace(s.cfg.Namespace).Resource(v1alpha1.SandboxResource)
}

// view is the E2B API's sandbox of an object.
func view(o *v1alpha1.Sandbox) store.Sandbox {
	started := o.CreationTimestamp.Time
	if o.Status.StartedAt != nil {
		started = o.Status.StartedAt.Time
	}
	sb := store.Sandbox{
		ID: o.Name,
		// The node's, once it started the sandbox: the template's built
		// ID and name, whichever of them spec.template gave.
		TemplateID: cmp.Or(o.Status.TemplateID, o.Spec.Template),
		Alias:      o.Status.Alias,
		CPUCount:   o.Status.CPUCount,
		MemoryMB:   o.Status.MemoryMB,
		DiskSizeMB: o.Status.DiskSizeMB,
		State:      state(o.Status.State),
		Reason:     o.Status.Reason,
		StartedAt:  started,
		EndAt:      started.Add(o.Spec.Timeout.Duration),
		Timeout:    o.Spec.Timeout.Duration,
		Metadata:   maps.Clone(o.Spec.Metadata),
		Secure:     o.Spec.Secure,
		EnvVars:    maps.Clone(o.Spec.EnvVars),
		// As the client sent them; the node normalizes its own copy.
		AllowInternetAccess: o.Spec.AllowInternetAccess,
		Network:             o.Spec.Network,
		// The node's, as a single host returns its own.
		EnvdAccessToken:    o.Status.EnvdAccessToken,
		TrafficAccessToken: o.Status.TrafficAccessToken,
	}
	switch {
	case o.Deleting() && !o.Status.State.Ended():
		sb.State, sb.Reason = store.StateKilled, store.ReasonKilled
	case overdue(o, time.Now()):
		sb.State, sb.Reason = store.StateKilled, store.ReasonTimeout
	}
	return sb
}

// state is the store's state of an object's.
func state(s v1alpha1.SandboxState) store.State {
	switch s {
	case v1alpha1.SandboxRunning:
		return store.StateRunning
	case v1alpha1.SandboxPaused:
		return store.StatePaused
	case v1alpha1.SandboxKilled:
		return store.StateKilled
	case v1alpha1.SandboxLost, v1alpha1.SandboxError:
		return store.StateError
	}
	return store.StateStarting
}
