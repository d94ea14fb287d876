package isolation

import (
	"context"
	"sync"
)

// Ending is the part of an Instance that every backend keeps alike: how
// the sandbox ended (Done, Exit) and Stop run once. A backend embeds it,
// calls StopOnce from its Stop and End when its sandbox's process is gone.
type Ending struct {
	done     chan struct{} // closed by End
	stopOnce sync.Once
	stopErr  error

	mu       sync.Mutex // guards the fields below
	stopping bool
	exit     Exit
}

// NewEnding returns the Ending of a sandbox that runs.
func NewEnding() *Ending { return &Ending{done: make(chan struct{})} }

// Done implements Instance.
func (e *Ending) Done() <-chan struct{} { return e.done }

// Exit implements Instance.
func (e *Ending) Exit() Exit {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.exit
}

// StopOnce runs stop, without ctx's cancellation (a stop half done leaks
// what it has not removed yet), the first time it is called, and returns
// its error every time. From the first call on, the sandbox's end is
// recorded as "stopped": it was asked for.
func (e *Ending) StopOnce(ctx context.Context, stop func(context.Context) error) error {
	e.stopOnce.Do(func() {
		e.MarkStopping()
		e.stopErr = stop(context.WithoutCancel(ctx))
	})
	return e.stopErr
}

// MarkStopping records the sandbox's end as "stopped" from now on, for a
// backend that ends its processes before Stop (Halter).
func (e *Ending) MarkStopping() {
	e.mu.Lock()
	e.stopping = true
	e.mu.Unlock()
}

// End records why the sandbox ended, unless it was being stopped, and
// closes Done. It is called once, when the sandbox's process is gone.
func (e *Ending) End(x Exit) {
	e.mu.Lock()
	if e.stopping {
		x.Reason = "stopped"
	}
	e.exit = x
	e.mu.Unlock()
	close(e.done)
}
