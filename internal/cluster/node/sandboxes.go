package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/agent-sandbox/agent-sandbox/internal/cluster/v1alpha1"
)

// Local is the node's own sandboxes, as the agent drives them for the
// Sandbox objects placed on it. Each local sandbox made for an object
// carries the object's UID as its key, so that an agent that restarts
// adopts it rather than creating it twice.
type Local interface {
	// Held returns the live local sandboxes made for objects, by key.
	Held(ctx context.Context) (map[string]LocalSandbox, error)
	// Create starts a sandbox for the object whose UID is key, with the
	// object's name as its ID: clients route to it by that name, through
	// the API replicas and on the node alike.
	Create(ctx context.Context, name, key string, spec v1alpha1.SandboxSpec) (LocalSandbox, error)
	// Ended says whether sandbox id no longer runs, and why.
	Ended(ctx context.Context, id string) (ended bool, reason string, err error)
	// Kill kills sandbox id; one already gone is no error.
	Kill(ctx context.Context, id string) error
	// SetEndAt makes sandbox id end at at, by its timeout (at least a
	// second from now).
	SetEndAt(ctx context.Context, id string, at time.Time) error
	// Pause pauses sandbox id, with its memory or its files only.
	Pause(ctx context.Context, id string, keepMemory bool) error
	// Resume resumes paused sandbox id, to end at at (at least a second
	// from now).
	Resume(ctx context.Context, id string, at time.Time) (LocalSandbox, error)
}

// LocalSandbox is one sandbox of the node, with the access tokens its
// clients need, which the agent reports in the object's status.
type LocalSandbox struct {
	ID                 string
	StartedAt          time.Time
	EnvdAccessToken    string
	TrafficAccessToken string
	// TemplateID and Alias are the built template's ID and name.
	TemplateID, Alias              string
	CPUCount, MemoryMB, DiskSizeMB int
}

// DefaultCheckInterval is how often the agent checks that the sandboxes it
// reported Running still run.
const DefaultCheckInterval = time.Second

// held is a local sandbox the agent runs for an object.
type held struct {
	name  string // the object's
	local LocalSandbox
	// timeout is the object's spec.timeout last applied; 0 for an adopted
	// sandbox, whose object's is applied again (it may have changed while
	// the agent was down).
	timeout time.Duration
}

// sandboxes acts on the Sandbox objects whose spec.node is this node: it
// lists and watches them (resuming from the last resourceVersion, listing
// again when that is too old), creates and kills the local sandboxes, and
// writes their status. Objects are handled on one goroutine, in the order
// the API server sends them, but for their creates: a burst of creates
// placed here is a burst of boots, which run at once as on a single host,
// each in a goroutine of its own; what arrives for an object while its
// create runs is acted on once the create is done.
type sandboxes struct {
	client    *rest.RESTClient
	namespace string
	node      string
	local     Local
	check     time.Duration
	log       *slog.Logger

	// held and finalizing are owned by run's goroutine: the objects whose
	// local sandbox this agent reported Running, and those being deleted
	// whose finalizer it has yet to remove (tried again every check), by
	// UID.
	held       map[types.UID]held
	finalizing map[types.UID]*v1alpha1.Sandbox
	// creating are the objects whose create runs, by UID, with what
	// arrived for each meanwhile (nil: nothing); created receives each
	// create's outcome. Owned by run's goroutine too.
	creating map[types.UID]*later
	created  chan createDone
	// running counts the create goroutines, which run waits for: a
	// server closes its sandbox manager only once no create is under way.
	running sync.WaitGroup
}

// later is what arrived for an object while its create ran: its newest
// version, or its deletion.
type later struct {
	o       *v1alpha1.Sandbox
	deleted bool
}

// createDone is a create's outcome: the sandbox held for object uid, or
// the error (already reported in the object's status).
type createDone struct {
	uid  types.UID
	held held
	err  error
}

func newSandboxes(client *rest.RESTClient, namespace, node string, local Local, check time.Duration, log *slog.Logger) *sandboxes {
	return &sandboxes{client: client, namespace: namespace, node: node, local: local, check: check, log: log,
		creating: make(map[types.UID]*later), created: make(chan createDone)}
}

// run keeps the node's sandboxes in line with their objects until ctx
// ends; API-server errors are logged and retried.
func (c *sandboxes) run(ctx context.Context) {
	defer c.running.Wait()
	for ctx.Err() == nil {
		rv, err := c.sync(ctx)
		if err == nil {
			err = c.watch(ctx, rv)
		}
		if err != nil && ctx.Err() == nil {
			c.log.Warn("watching the node's sandboxes", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// selector is the node's sandboxes: the CRD makes spec.node selectable.
func (c *sandboxes) selector() string { return "spec.node=" + c.node }

// sync lists the node's objects and acts on each, and kills the local
// sandboxes of objects that are gone (deleted while the agent was down).
// It returns the list's resourceVersion, where the watch starts.
func (c *sandboxes) sync(ctx context.Context) (string, error) {
	// The creates of the last watch end first: the list sees what they
	// made (the status they wrote, the local sandbox to adopt).
	for len(c.creating) > 0 {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case d := <-c.created:
			delete(c.creating, d.uid)
		}
	}
	local, err := c.local.Held(ctx)
	if err != nil {
		return "", fmt.Errorf("listing the local sandboxes: %w", err)
	}
	var list v1alpha1.SandboxList
	err = c.client.Get().Namespace(c.namespace).Resource(v1alpha1.SandboxResource).
		VersionedParams(&metav1.ListOptions{FieldSelector: c.selector()}, metav1.ParameterCodec).
		Do(ctx).Into(&list)
	if err != nil {
		return "", fmt.Errorf("listing sandboxes of node %s: %w", c.node, err)
	}
	objects := make(map[types.UID]string, len(list.Items)) // UID → name
	for _, o := range list.Items {
		objects[o.UID] = o.Name
	}
	c.held = make(map[types.UID]held)
	c.finalizing = make(map[types.UID]*v1alpha1.Sandbox)
	for key, ls := range local {
		if name, ok := objects[types.UID(key)]; ok {
			c.held[types.UID(key)] = held{name: name, local: ls}
			continue
		}
		c.log.Info("killing a sandbox whose object is gone", "sandbox_id", ls.ID, "uid", key)
		if err := c.local.Kill(ctx, ls.ID); err != nil {
			return "", fmt.Errorf("killing sandbox %s, whose object %s is gone: %w", ls.ID, key, err)
		}
	}
	for i := range list.Items {
		c.reconcile(ctx, &list.Items[i])
	}
	return list.ResourceVersion, nil
}

// watch acts on the node's objects as they change, from resourceVersion
// rv, and checks the held sandboxes every check interval. It returns nil
// when the watch must start again from a fresh list (rv too old).
func (c *sandboxes) watch(ctx context.Context, rv string) error {
	tick := time.NewTicker(c.check)
	defer tick.Stop()
	for {
		w, err := c.client.Get().Namespace(c.namespace).Resource(v1alpha1.SandboxResource).
			VersionedParams(&metav1.ListOptions{FieldSelector: c.selector(), ResourceVersion: rv, Watch: true, AllowWatchBookmarks: true}, metav1.ParameterCodec).
			Watch(ctx)
		if err != nil {
			return fmt.Errorf("watching sandboxes of node %s from %s: %w", c.node, rv, err)
		}
		rv, err = c.events(ctx, w, rv, tick.C)
		w.Stop()
		if err != nil || rv == "" || ctx.Err() != nil {
			return err
		}
	}
}

// events handles one watch's events until it closes; it returns the last
// resourceVersion seen, "" when the watch expired and a list is due.
func (c *sandboxes) events(ctx context.Context, w watch.Interface, rv string, tick <-chan time.Time) (string, error) {
	for {
		select {
		case <-ctx.Done():
			return rv, nil
		case d := <-c.created:
			c.finish(ctx, d)
		case <-tick:
			c.checkHeld(ctx)
			for _, o := range c.finalizing {
				c.finalize(ctx, o)
			}
		case ev, ok := <-w.ResultChan():
			if !ok {
				return rv, nil // the server ends watches now and then: go on from rv
			}
			if ev.Type == watch.Error {
				status := apierrors.FromObject(ev.Object)
				if apierrors.IsResourceExpired(status) || apierrors.IsGone(status) {
					return "", nil
				}
				return "", fmt.Errorf("watching sandboxes of node %s: %w", c.node, status)
			}
			o, isSandbox := ev.Object.(*v1alpha1.Sandbox)
			if !isSandbox {
				return "", fmt.Errorf("watching sandboxes of node %s: a %s event of %T", c.node, ev.Type, ev.Object)
			}
			rv = o.ResourceVersion
			switch ev.Type {
			case watch.Added, watch.Modified:
				c.reconcile(ctx, o)
			case watch.Deleted:
				c.deleted(ctx, o)
			}
		}
	}
}

// reconcile brings the local sandbox of o, and o's status, in line with
// o: a sandbox created for a new object and reported Running (as is one
// adopted at sync, which a previous agent made), one killed for an object
// marked ended or being deleted.
func (c *sandboxes) reconcile(ctx context.Context, o *v1alpha1.Sandbox) {
	if _, busy := c.creating[o.UID]; busy {
		c.creating[o.UID] = &later{o: o}
		return
	}
	log := c.log.With("sandbox", o.Name, "uid", o.UID)
	if o.Deleting() {
		c.finalize(ctx, o)
		return
	}
	h, isHeld := c.held[o.UID]
	if o.Status.State.Ended() {
		c.killHeld(ctx, o.UID, "an object marked "+string(o.Status.State), log)
		return
	}
	switch {
	case isHeld && c.pauseOrResume(ctx, o, h, log):
	case isHeld:
		// Adopted, or a status write that failed: say so unless the
		// object says it already.
		// A reason left by a pause that failed goes too.
		if o.Status.State != v1alpha1.SandboxRunning || o.Status.Node != c.node || o.Status.EnvdAccessToken != h.local.EnvdAccessToken || o.Status.TemplateID != h.local.TemplateID || o.Status.Reason != "" {
			c.setStatus(ctx, o.Name, running(c.node, h.local), log)
		}
		if o.Spec.Timeout.Duration != h.timeout {
			c.setTimeout(ctx, o, h, log)
		}
	case o.Status.State == v1alpha1.SandboxRunning:
		// Running once, yet not on this node now: it ended while the
		// agent was down and its record is gone.
		c.setStatus(ctx, o.Name, ended(v1alpha1.SandboxKilled, c.node, "not found on node "+c.node), log)
	default:
		c.startCreate(ctx, o, log)
	}
}

// startCreate creates the local sandbox of o and reports it Running (or
// Error, with the create's message and class) in a goroutine of its own,
// which hands the outcome to run's (finish).
func (c *sandboxes) startCreate(ctx context.Context, o *v1alpha1.Sandbox, log *slog.Logger) {
	c.creating[o.UID] = nil
	c.running.Go(func() {
		t0 := time.Now()
		ls, err := c.local.Create(ctx, o.Name, string(o.UID), o.Spec)
		if err != nil {
			log.Warn("creating the sandbox of an object", "err", err)
			status := ended(v1alpha1.SandboxError, c.node, err.Error())
			status["errorClass"] = orNil(string(ErrorClass(err)))
			c.setStatus(ctx, o.Name, status, log)
		} else {
			log.Info("sandbox created for its object", "sandbox_id", ls.ID, "took", time.Since(t0).Round(time.Millisecond))
			c.setStatus(ctx, o.Name, running(c.node, ls), log)
		}
		select {
		case c.created <- createDone{uid: o.UID, held: held{name: o.Name, local: ls, timeout: o.Spec.Timeout.Duration}, err: err}:
		case <-ctx.Done(): // the agent stops: the next one adopts the sandbox
		}
	})
}

// finish takes a create's outcome on run's goroutine: the sandbox is held,
// and what arrived for its object meanwhile is acted on. After a failed
// create, only a deletion is: the versions that arrived predate the
// Error status the create wrote, and would create it again.
func (c *sandboxes) finish(ctx context.Context, d createDone) {
	next := c.creating[d.uid]
	delete(c.creating, d.uid)
	if d.err == nil {
		c.held[d.uid] = d.held
	}
	switch {
	case next == nil:
	case next.deleted:
		c.deleted(ctx, next.o)
	case d.err == nil || next.o.Deleting():
		c.reconcile(ctx, next.o)
	}
}

// pauseOrResume applies o's spec.pause to its held sandbox h: pauses it
// when asked, resumes it when no longer asked, each once per generation
// of the object (a failure is reported, not retried, and the replica that
// asked hears of it). It says whether the sandbox is paused or about to
// change, when nothing else of o applies.
func (c *sandboxes) pauseOrResume(ctx context.Context, o *v1alpha1.Sandbox, h held, log *slog.Logger) bool {
	paused := o.Status.State == v1alpha1.SandboxPaused
	want := o.Spec.Pause != ""
	if paused == want {
		return paused
	}
	if o.Status.ObservedGeneration == o.Generation {
		return true // tried at this generation, and failed: reported
	}
	var status map[string]any
	var err error
	if want {
		if err = c.local.Pause(ctx, h.local.ID, o.Spec.Pause == v1alpha1.PauseMemory); err == nil {
			status = map[string]any{"state": v1alpha1.SandboxPaused, "node": c.node, "reason": nil, "errorClass": nil}
			log.Info("sandbox paused for its object", "sandbox_id", h.local.ID, "pause", o.Spec.Pause)
		}
	} else {
		endAt := h.local.StartedAt.Truncate(time.Second).Add(o.Spec.Timeout.Duration)
		var ls LocalSandbox
		if ls, err = c.local.Resume(ctx, h.local.ID, endAt); err == nil {
			h.local, h.timeout = ls, o.Spec.Timeout.Duration
			c.held[o.UID] = h
			status = running(c.node, ls)
			log.Info("sandbox resumed for its object", "sandbox_id", h.local.ID)
		}
	}
	if err != nil {
		log.Warn("pausing or resuming the sandbox of an object", "sandbox_id", h.local.ID, "pause", o.Spec.Pause, "err", err)
		status = map[string]any{"reason": err.Error(), "errorClass": orNil(string(ErrorClass(err)))}
	}
	status["observedGeneration"] = o.Generation
	c.setStatus(ctx, o.Name, status, log)
	return true
}

// setTimeout applies a changed spec.timeout (an API replica's setTimeout):
// the sandbox ends that long after its status.startedAt. The status holds
// whole seconds, and the replica counted from it, so this does too.
func (c *sandboxes) setTimeout(ctx context.Context, o *v1alpha1.Sandbox, h held, log *slog.Logger) {
	endAt := h.local.StartedAt.Truncate(time.Second).Add(o.Spec.Timeout.Duration)
	if err := c.local.SetEndAt(ctx, h.local.ID, endAt); err != nil {
		log.Warn("changing the timeout of a sandbox", "sandbox_id", h.local.ID, "err", err)
		return
	}
	h.timeout = o.Spec.Timeout.Duration
	c.held[o.UID] = h
	log.Info("sandbox timeout changed", "sandbox_id", h.local.ID, "end_at", endAt.UTC().Format(time.RFC3339))
}

// finalize kills the local sandbox of o, which is being deleted, and then
// removes o's finalizer, so that the deletion (a kill) completes once the
// sandbox is gone; what fails is tried again at the next check.
func (c *sandboxes) finalize(ctx context.Context, o *v1alpha1.Sandbox) {
	log := c.log.With("sandbox", o.Name, "uid", o.UID)
	c.finalizing[o.UID] = o
	if !c.killHeld(ctx, o.UID, "a deleted object", log) {
		return
	}
	if err := v1alpha1.RemoveNodeFinalizer(ctx, c.client, o); err != nil {
		log.Warn("letting the deletion of a sandbox complete", "err", err)
		return
	}
	delete(c.finalizing, o.UID)
}

// deleted kills the local sandbox of a deleted object, which had no
// finalizer or had it removed.
func (c *sandboxes) deleted(ctx context.Context, o *v1alpha1.Sandbox) {
	if _, busy := c.creating[o.UID]; busy {
		c.creating[o.UID] = &later{o: o, deleted: true}
		return
	}
	delete(c.finalizing, o.UID)
	c.killHeld(ctx, o.UID, "a deleted object", c.log.With("sandbox", o.Name, "uid", o.UID))
}

// killHeld kills the local sandbox held for object uid, if any, and says
// whether none is left; whose is the object's case, for the log.
func (c *sandboxes) killHeld(ctx context.Context, uid types.UID, whose string, log *slog.Logger) bool {
	h, ok := c.held[uid]
	if !ok {
		return true
	}
	if err := c.local.Kill(ctx, h.local.ID); err != nil {
		log.Warn("killing the sandbox of "+whose, "sandbox_id", h.local.ID, "err", err)
		return false
	}
	delete(c.held, uid)
	log.Info("killed the sandbox of "+whose, "sandbox_id", h.local.ID)
	return true
}

// checkHeld marks Killed, with the local reason, the objects whose local
// sandbox ended (its timeout, a kill through the node's own API).
func (c *sandboxes) checkHeld(ctx context.Context) {
	for uid, h := range c.held {
		gone, reason, err := c.local.Ended(ctx, h.local.ID)
		if err != nil {
			c.log.Warn("checking a held sandbox", "sandbox_id", h.local.ID, "err", err)
			continue
		}
		if !gone {
			continue
		}
		log := c.log.With("sandbox", h.name, "uid", uid, "sandbox_id", h.local.ID)
		if c.setStatus(ctx, h.name, ended(v1alpha1.SandboxKilled, c.node, reason), log) {
			delete(c.held, uid)
		}
	}
}

// running and ended are status patches: a JSON merge patch of the status
// subresource, which needs no resourceVersion and so meets no conflict
// with the API replicas' writes of spec or metadata. A nil value clears;
// an ended sandbox's tokens go, as they open nothing any more.
func running(node string, ls LocalSandbox) map[string]any {
	return map[string]any{"state": v1alpha1.SandboxRunning, "node": node, "reason": nil, "errorClass": nil, "startedAt": metav1.NewTime(ls.StartedAt),
		"envdAccessToken": orNil(ls.EnvdAccessToken), "trafficAccessToken": orNil(ls.TrafficAccessToken),
		"templateID": orNil(ls.TemplateID), "alias": orNil(ls.Alias), "cpuCount": ls.CPUCount, "memoryMB": ls.MemoryMB, "diskSizeMB": ls.DiskSizeMB}
}

// orNil is s, or nil (which clears the field) for "".
func orNil(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func ended(state v1alpha1.SandboxState, node, reason string) map[string]any {
	return map[string]any{"state": state, "node": node, "reason": reason, "errorClass": nil, "envdAccessToken": nil, "trafficAccessToken": nil}
}

// setStatus writes status to object name's status and says whether it did;
// an object deleted meanwhile counts as written.
func (c *sandboxes) setStatus(ctx context.Context, name string, status map[string]any, log *slog.Logger) bool {
	body, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		log.Error("encoding a sandbox status", "err", err)
		return false
	}
	err = c.client.Patch(types.MergePatchType).Namespace(c.namespace).Resource(v1alpha1.SandboxResource).Name(name).SubResource("status").
		Body(body).Do(ctx).Error()
	var se *apierrors.StatusError
	switch {
	case err == nil:
		log.Info("sandbox status written", "state", status["state"])
		return true
	case errors.As(err, &se) && se.Status().Code == http.StatusNotFound:
		return true
	default:
		log.Warn("writing the sandbox status", "state", status["state"], "err", err)
		return false
	}
}
