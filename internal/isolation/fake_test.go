package isolation

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
)

func TestFake(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	f.Handle(49983, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "envd "+r.URL.Path)
	}))
	inst, err := f.Start(ctx, Spec{ID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	get := func(port int) (string, error) {
		c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return inst.Dial(ctx, port)
		}}}
		resp, err := c.Get("http://sandbox/health")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	if got, err := get(49983); err != nil || got != "envd /health" {
		t.Errorf("GET = %q, %v", got, err)
	}
	if _, err := inst.Dial(ctx, 1); !errors.Is(err, ErrPortClosed) {
		t.Errorf("Dial to a closed port: %v", err)
	}
	if err := inst.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := inst.Dial(ctx, 49983); err == nil {
		t.Error("Dial while paused succeeded")
	}
	if err := inst.Resume(ctx); err != nil {
		t.Fatal(err)
	}

	// Adopt finds it while it runs; Crash ends it with the given Exit.
	if _, err := f.Adopt(ctx, "a", inst.State()); err != nil {
		t.Errorf("Adopt: %v", err)
	}
	f.Instance("a").Crash(Exit{OOM: true, Reason: "oom"})
	<-inst.Done()
	if !inst.Exit().OOM {
		t.Errorf("Exit = %+v", inst.Exit())
	}
	if _, err := f.Adopt(ctx, "a", inst.State()); !errors.Is(err, ErrGone) {
		t.Errorf("Adopt after crash: %v", err)
	}
	if _, err := inst.Dial(ctx, 49983); !errors.Is(err, ErrGone) {
		t.Errorf("Dial after crash: %v", err)
	}

	f.FailStarts(errors.New("boom"))
	if _, err := f.Start(ctx, Spec{ID: "b"}); err == nil {
		t.Error("Start succeeded despite FailStarts")
	}
	f.FailStarts(nil)
	b, err := f.Start(ctx, Spec{ID: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Cleanup(ctx, "b", b.State()); err != nil || !f.Instance("b").Stopped() || len(f.Running()) != 0 {
		t.Errorf("Cleanup: %v, running %v", err, f.Running())
	}
}
