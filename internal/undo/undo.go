// Package undo rolls back a setup of several steps: after each step that
// succeeds, push what undoes it; if a later step fails, Run undoes them
// all, newest first. The shape of gVisor's pkg/cleanup.
package undo

import (
	"context"
	"errors"
	"slices"
	"time"
)

// Timeout bounds a Run: undo steps tear down kernel objects (mounts,
// cgroups, processes) that normally go in well under a second.
const Timeout = 30 * time.Second

// Stack is a list of undo steps; the zero Stack is empty and ready.
type Stack []func(context.Context) error

// Push adds f, to run before every step pushed earlier.
func (s *Stack) Push(f func(context.Context) error) { *s = append(*s, f) }

// Run runs the steps newest first, each whatever the others returned, and
// joins their errors. They run under their own deadline (Timeout), not
// under the caller's context: a setup that failed because its context
// ended must still be undone.
func (s Stack) Run() error {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	var errs []error
	for _, f := range slices.Backward(s) {
		errs = append(errs, f(ctx))
	}
	return errors.Join(errs...)
}
