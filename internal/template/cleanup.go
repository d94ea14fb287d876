package template

import (
	"context"
	"errors"
	"fmt"
)

// cleanup is a stack of undo actions for multi-step setup: push an undo after
// each step that succeeded, run them all (last first) on the way out.
type cleanup struct {
	undo []undoFn
}

type undoFn struct {
	what string
	fn   func(context.Context) error
}

func (c *cleanup) push(what string, fn func(context.Context) error) {
	c.undo = append(c.undo, undoFn{what, fn})
}

// run runs every pushed action in reverse order, even after one fails, and
// returns the joined errors. The stack is empty afterwards. Callers pass a
// context that is not cancelled (context.WithoutCancel) so that teardown
// completes after the build's context is done.
func (c *cleanup) run(ctx context.Context) error {
	var errs []error
	for i := len(c.undo) - 1; i >= 0; i-- {
		if err := c.undo[i].fn(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.undo[i].what, err))
		}
	}
	c.undo = nil
	return errors.Join(errs...)
}
