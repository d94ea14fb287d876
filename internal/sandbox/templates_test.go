package sandbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// A template is deleted only when nothing runs over its files, and no
// create starts from it while it is being deleted.
func TestDeleteTemplate(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(t, CreateRequest{Timeout: time.Minute})
	removed := 0
	remove := func(context.Context) error { removed++; return nil }

	err := e.m.DeleteTemplate(t.Context(), "base", remove)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "cannot delete template 'base' because there are running or paused sandboxes using it ("+sb.ID+")") {
		t.Fatalf("DeleteTemplate with a sandbox running = %v", err)
	}
	if err := e.m.Pause(t.Context(), sb.ID, true); err != nil {
		t.Fatal(err)
	}
	if err := e.m.DeleteTemplate(t.Context(), "base", remove); !errors.Is(err, ErrInvalid) {
		t.Fatalf("DeleteTemplate with a sandbox paused = %v, want ErrInvalid", err)
	}
	if err := e.m.Kill(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if removed != 0 {
		t.Fatalf("remove ran %d times while sandboxes used the template", removed)
	}

	// While remove runs, a create of the template fails, and so does a
	// second delete.
	err = e.m.DeleteTemplate(t.Context(), "base", func(ctx context.Context) error {
		removed++
		if _, err := e.m.Create(ctx, CreateRequest{Template: "base", Timeout: time.Minute}); !errors.Is(err, ErrInvalid) ||
			!strings.Contains(err.Error(), "being deleted") {
			t.Errorf("Create during the delete = %v, want ErrInvalid saying it is being deleted", err)
		}
		if err := e.m.DeleteTemplate(ctx, "base", remove); !errors.Is(err, ErrConflict) {
			t.Errorf("a second DeleteTemplate during the first = %v, want ErrConflict", err)
		}
		return nil
	})
	if err != nil || removed != 1 {
		t.Fatalf("DeleteTemplate with no sandbox left = %v, remove ran %d times; want it once", err, removed)
	}
}

// A template with a warm pool is not deleted.
func TestDeleteTemplatePooled(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.WarmPools = map[string]PoolSize{"base": {Min: 1, Max: 1}} })
	err := e.m.DeleteTemplate(t.Context(), "base", func(context.Context) error { return errors.New("removed") })
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "warm pool") {
		t.Errorf("DeleteTemplate of a pooled template = %v, want ErrInvalid naming the pool", err)
	}
}
