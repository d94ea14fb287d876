package undo

import (
	"context"
	"errors"
	"slices"
	"testing"
)

func TestRunNewestFirstJoiningErrors(t *testing.T) {
	var order []int
	errA, errC := errors.New("a"), errors.New("c")
	var s Stack
	s.Push(func(context.Context) error { order = append(order, 1); return errA })
	s.Push(func(context.Context) error { order = append(order, 2); return nil })
	s.Push(func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("undo step runs without a deadline")
		}
		order = append(order, 3)
		return errC
	})
	err := s.Run()
	if want := []int{3, 2, 1}; !slices.Equal(order, want) {
		t.Errorf("ran %v, want %v", order, want)
	}
	if !errors.Is(err, errA) || !errors.Is(err, errC) {
		t.Errorf("Run = %v, want both step errors", err)
	}
	var empty Stack
	if err := empty.Run(); err != nil {
		t.Errorf("empty Run = %v", err)
	}
}
