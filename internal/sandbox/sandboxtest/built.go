package sandboxtest

import (
	"cmp"
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/egress"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// CacheDir is the template cache the root tests of every package share, so
// that a template (base above all: minutes of debootstrap) is built once
// per machine and run: AGENT_SANDBOX_TEST_CACHE, or
// /var/cache/agent-sandbox-test. `make test-sdk` seeds its server's data
// directory from it.
func CacheDir() string {
	return cmp.Or(os.Getenv("AGENT_SANDBOX_TEST_CACHE"), "/var/cache/agent-sandbox-test")
}

// Built returns spec built into CacheDir as the server builds it, with the
// templates it starts from; what the cache lacks is built by a step runner
// behind the default build egress policy. That runs in a subtest, so that
// the step runner's host lock is released before t starts a stack of its
// own.
func Built(t *testing.T, spec template.Spec) *template.Template {
	t.Helper()
	var tmpl *template.Template
	t.Run("build "+spec.Name, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 40*time.Minute)
		defer cancel()
		b := &template.Builder{
			DataDir: CacheDir(), Steps: StepRunner(t, egress.DefaultCeiling()), StepTimeout: 20 * time.Minute,
			Log:      slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})),
			Progress: t.Output(),
		}
		var err error
		if tmpl, err = b.Ensure(ctx, spec); err != nil {
			t.Fatal(err)
		}
		t.Logf("template %s at %s", tmpl.ID, tmpl.RootFS)
	})
	if tmpl == nil {
		t.FailNow()
	}
	return tmpl
}
