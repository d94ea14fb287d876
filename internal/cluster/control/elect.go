package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/agent-sandbox/agent-sandbox/internal/cluster/kubeclient"
)

// LeaderLease is the Lease the API replicas elect their leader on; the api
// role's RBAC lets it update this Lease alone.
const LeaderLease = "agent-sandbox-api-leader"

// Defaults of ElectionConfig, client-go's leader election figures: a
// leader that cannot renew for 10 s stops leading, and the others take
// over 15 s after they last saw the Lease move.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// ElectionConfig is one candidate's.
type ElectionConfig struct {
	// Namespace and Name are the Lease's.
	Namespace, Name string
	// Identity names this candidate in the Lease's holderIdentity: unique
	// among the replicas.
	Identity string
	// LeaseDuration is how long the others wait, after they last saw the
	// Lease change, before they take it.
	LeaseDuration time.Duration
	// RenewDeadline is how long a leader goes on without a renewal before
	// it stops leading: less than LeaseDuration, so that it has stopped
	// before another starts.
	RenewDeadline time.Duration
	// RetryPeriod is how often a leader renews and a candidate tries.
	RetryPeriod time.Duration
}

// Validate names the first field that cannot work.
func (c ElectionConfig) Validate() error {
	switch {
	case c.Namespace == "" || c.Name == "":
		return errors.New("leader election: no lease namespace or name")
	case c.Identity == "":
		return errors.New("leader election: identity is empty")
	case c.LeaseDuration < time.Second:
		return fmt.Errorf("leader election: lease duration %s: want at least 1s", c.LeaseDuration)
	case c.RenewDeadline <= 0 || c.RenewDeadline >= c.LeaseDuration:
		return fmt.Errorf("leader election: renew deadline %s: want more than 0 and less than the lease duration %s", c.RenewDeadline, c.LeaseDuration)
	case c.RetryPeriod <= 0 || c.RetryPeriod >= c.RenewDeadline:
		return fmt.Errorf("leader election: retry period %s: want more than 0 and less than the renew deadline %s", c.RetryPeriod, c.RenewDeadline)
	}
	return nil
}

// Elector is one candidate for leader. client-go's leaderelection does the
// same, but its lock package links every typed client of client-go (see
// kubeclient); this one speaks to the Lease alone.
//
// Expiry is judged by this candidate's clock, from when it saw the Lease
// change, never from the times written in it: the replicas' clocks need
// not agree.
type Elector struct {
	cfg    ElectionConfig
	leases *rest.RESTClient
	log    *slog.Logger

	// Owned by Run's goroutine.
	observed    *coordinationv1.Lease // as last read or written; never changed
	observedAt  time.Time             // when it last changed, by our clock
	lastRenewal time.Time             // our last successful write
}

// NewElector is a candidate on kube's API server.
func NewElector(kube *rest.Config, cfg ElectionConfig, log *slog.Logger) (*Elector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	leases, err := kubeclient.New(kube, coordinationv1.SchemeGroupVersion, coordinationv1.AddToScheme)
	if err != nil {
		return nil, err
	}
	return &Elector{cfg: cfg, leases: leases, log: log.With("lease", cfg.Name, "identity", cfg.Identity)}, nil
}

// Run campaigns until ctx ends. Each time it wins, it calls lead with a
// context that ends when the lead is lost (no renewal within
// RenewDeadline) or ctx ends, and waits for lead to return before it
// campaigns again: lead must return soon after its context ends. When ctx
// ends while leading, the Lease is released, so another candidate takes
// over at its next try instead of after LeaseDuration.
func (e *Elector) Run(ctx context.Context, lead func(context.Context)) {
	for e.acquire(ctx) {
		e.log.Info("leading")
		leadCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			lead(leadCtx)
		}()
		e.renew(leadCtx)
		stop()
		<-done
		if ctx.Err() != nil {
			e.release(context.WithoutCancel(ctx))
			return
		}
		e.log.Warn("lost the lead", "last_renewal", e.lastRenewal.Format(time.RFC3339Nano))
	}
}

// acquire tries every RetryPeriod until this candidate holds the Lease
// (true) or ctx ends (false).
func (e *Elector) acquire(ctx context.Context) bool {
	for {
		if e.try(ctx) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(e.cfg.RetryPeriod):
		}
	}
}

// renew renews every RetryPeriod and returns when ctx ends or no renewal
// succeeded for RenewDeadline.
func (e *Elector) renew(ctx context.Context) {
	tick := time.NewTicker(e.cfg.RetryPeriod)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		deadline := e.lastRenewal.Add(e.cfg.RenewDeadline)
		tryCtx, cancel := context.WithDeadline(ctx, deadline)
		ok := e.try(tryCtx)
		cancel()
		if !ok && !time.Now().Before(deadline) {
			return
		}
	}
}

// try takes or renews the Lease in one read and one write, and says
// whether this candidate holds it now. The write carries the read's
// resourceVersion, so of two candidates writing at once one fails.
func (e *Elector) try(ctx context.Context) bool {
	now := time.Now()
	l := new(coordinationv1.Lease)
	err := e.leases.Get().Namespace(e.cfg.Namespace).Resource("leases").Name(e.cfg.Name).Do(ctx).Into(l)
	switch {
	case apierrors.IsNotFound(err):
		return e.create(ctx, now)
	case err != nil:
		e.logTry("reading the leader lease", err)
		return false
	}
	if e.observed == nil || l.ResourceVersion != e.observed.ResourceVersion {
		e.observe(l, now)
	}
	holder := ptr.Deref(l.Spec.HolderIdentity, "")
	if holder != "" && holder != e.cfg.Identity && now.Before(e.observedAt.Add(e.leaseDuration(l))) {
		return false
	}
	nowMicro := metav1.NewMicroTime(now)
	next := l.DeepCopy()
	if holder != e.cfg.Identity {
		next.Spec.AcquireTime = &nowMicro
		next.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
		next.Spec.HolderIdentity = ptr.To(e.cfg.Identity)
	}
	next.Spec.RenewTime = &nowMicro
	next.Spec.LeaseDurationSeconds = ptr.To(int32(e.cfg.LeaseDuration / time.Second))
	updated := new(coordinationv1.Lease)
	if err := e.leases.Put().Namespace(e.cfg.Namespace).Resource("leases").Name(e.cfg.Name).Body(next).Do(ctx).Into(updated); err != nil {
		e.logTry("writing the leader lease", err)
		return false
	}
	if holder != e.cfg.Identity {
		e.log.Info("took the leader lease", "from", holder)
	}
	e.observe(updated, now)
	e.lastRenewal = now
	return true
}

// create makes the Lease, held by this candidate.
func (e *Elector) create(ctx context.Context, now time.Time) bool {
	nowMicro := metav1.NewMicroTime(now)
	l := &coordinationv1.Lease{
		TypeMeta:   metav1.TypeMeta{APIVersion: coordinationv1.SchemeGroupVersion.String(), Kind: "Lease"},
		ObjectMeta: metav1.ObjectMeta{Name: e.cfg.Name, Namespace: e.cfg.Namespace},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(e.cfg.Identity),
			LeaseDurationSeconds: ptr.To(int32(e.cfg.LeaseDuration / time.Second)),
			AcquireTime:          &nowMicro,
			RenewTime:            &nowMicro,
			LeaseTransitions:     ptr.To[int32](0),
		},
	}
	created := new(coordinationv1.Lease)
	if err := e.leases.Post().Namespace(e.cfg.Namespace).Resource("leases").Body(l).Do(ctx).Into(created); err != nil {
		e.logTry("creating the leader lease", err)
		return false
	}
	e.log.Info("created the leader lease")
	e.observe(created, now)
	e.lastRenewal = now
	return true
}

// release gives the Lease up, so that another candidate need not wait
// for it to expire: no holder, and a duration of one second, as client-go
// releases. A failure only costs the others that wait.
func (e *Elector) release(ctx context.Context) {
	if e.observed == nil || ptr.Deref(e.observed.Spec.HolderIdentity, "") != e.cfg.Identity {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.RetryPeriod)
	defer cancel()
	now := metav1.NowMicro()
	l := e.observed.DeepCopy()
	l.Spec.HolderIdentity = nil
	l.Spec.LeaseDurationSeconds = ptr.To[int32](1)
	l.Spec.RenewTime = &now
	l.Spec.AcquireTime = &now
	if err := e.leases.Put().Namespace(e.cfg.Namespace).Resource("leases").Name(e.cfg.Name).Body(l).Do(ctx).Error(); err != nil {
		e.log.Warn("releasing the leader lease", "err", err)
		return
	}
	e.log.Info("released the leader lease")
}

func (e *Elector) observe(l *coordinationv1.Lease, at time.Time) {
	e.observed, e.observedAt = l, at
}

// leaseDuration is the Lease's own duration (a released Lease says one
// second), or ours if it names none.
func (e *Elector) leaseDuration(l *coordinationv1.Lease) time.Duration {
	if d := l.Spec.LeaseDurationSeconds; d != nil {
		return time.Duration(*d) * time.Second
	}
	return e.cfg.LeaseDuration
}

// logTry logs a failed try; a conflict (another candidate wrote first) is
// the normal way to lose a race, and not worth a warning.
func (e *Elector) logTry(step string, err error) {
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || errors.Is(err, context.Canceled) {
		e.log.Debug(step, "err", err)
		return
	}
	e.log.Warn(step, "err", err)
}
