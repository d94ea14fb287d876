package isolation

import (
	"context"
	"errors"
	"testing"
)

func TestEnding(t *testing.T) {
	t.Run("ends by itself", func(t *testing.T) {
		e := NewEnding()
		e.End(Exit{OOM: true, Reason: "init exited"})
		<-e.Done()
		if x := e.Exit(); !x.OOM || x.Reason != "init exited" {
			t.Errorf("Exit = %+v", x)
		}
	})
	t.Run("stopped", func(t *testing.T) {
		e := NewEnding()
		runs := 0
		stop := func(ctx context.Context) error {
			runs++
			if ctx.Err() != nil {
				t.Error("stop ran with a cancelled context")
			}
			e.End(Exit{Reason: "killed by signal 9"})
			return errors.New("a leftover")
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		for range 2 {
			if err := e.StopOnce(ctx, stop); err == nil || err.Error() != "a leftover" {
				t.Errorf("StopOnce = %v, want stop's error each time", err)
			}
		}
		if runs != 1 {
			t.Errorf("stop ran %d times", runs)
		}
		if x := e.Exit(); x.Reason != "stopped" {
			t.Errorf("Exit = %+v, want stopped", x)
		}
	})
}
