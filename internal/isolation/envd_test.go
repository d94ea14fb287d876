package isolation

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

func TestWaitEnvd(t *testing.T) {
	t.Run("until envd listens and answers", func(t *testing.T) {
		f := NewFake()
		inst, err := f.Start(context.Background(), Spec{ID: "late"})
		if err != nil {
			t.Fatal(err)
		}
		// First not listening, then listening but not healthy, then healthy.
		var healthy atomic.Bool
		time.AfterFunc(50*time.Millisecond, func() {
			f.Instance("late").Handle(EnvdPort, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/health" || !healthy.Load() {
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				w.WriteHeader(http.StatusNoContent)
			}))
		})
		time.AfterFunc(150*time.Millisecond, func() { healthy.Store(true) })
		t0 := time.Now()
		if err := WaitEnvd(context.Background(), inst); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(t0); d < 150*time.Millisecond {
			t.Errorf("returned after %v, before envd was healthy", d)
		}
	})
	t.Run("sandbox ends", func(t *testing.T) {
		f := NewFake()
		inst, err := f.Start(context.Background(), Spec{ID: "dies"})
		if err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(50*time.Millisecond, func() { f.Instance("dies").Crash(Exit{Reason: "init exited"}) })
		if err := WaitEnvd(context.Background(), inst); !errors.Is(err, ErrGone) {
			t.Errorf("WaitEnvd = %v, want ErrGone", err)
		}
	})
	t.Run("ctx ends", func(t *testing.T) {
		f := NewFake()
		inst, err := f.Start(context.Background(), Spec{ID: "never"})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if err := WaitEnvd(ctx, inst); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrPortClosed) {
			t.Errorf("WaitEnvd = %v, want the deadline and the last error (port closed)", err)
		}
	})
}
