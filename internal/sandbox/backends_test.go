package sandbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// A backend that cannot pause is never asked to: pause and autoPause are
// refused with its name.
func TestBackendWithoutPause(t *testing.T) {
	fake := isolation.NewFakeNamed("nopause", isolation.Capabilities{})
	e := newEnv(t, func(c *Config) { c.Backend = fake })
	e.fake = fake
	fake.Handle(EnvdPort, e.envd)
	ctx := context.Background()

	sb := e.create(t, CreateRequest{})
	if r := e.record(t, sb.ID); r.Backend != "nopause" {
		t.Errorf("recorded backend %q, want nopause", r.Backend)
	}
	err := e.m.Pause(ctx, sb.ID, true)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "nopause backend cannot pause") {
		t.Errorf("Pause = %v, want ErrInvalid naming the backend", err)
	}
	if fake.Instance(sb.ID).Paused() || e.record(t, sb.ID).State != store.StateRunning {
		t.Error("a refused pause changed the sandbox")
	}
	_, err = e.m.Create(ctx, CreateRequest{Template: "base", Timeout: time.Minute, AutoPause: true})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "nopause backend cannot pause") {
		t.Errorf("Create with autoPause = %v, want ErrInvalid naming the backend", err)
	}
}

// After a restart with another backend chosen, each sandbox is adopted by
// the backend its record names, and new ones start on the chosen one.
func TestAdoptWithEachSandboxsBackend(t *testing.T) {
	first := isolation.NewFakeNamed("first", isolation.Capabilities{Pause: true})
	second := isolation.NewFakeNamed("second", isolation.Capabilities{Pause: true})
	e := newEnv(t, func(c *Config) { c.Backend = first })
	first.Handle(EnvdPort, e.envd)
	second.Handle(EnvdPort, e.envd)
	old := e.create(t, CreateRequest{})
	if err := e.m.Close(); err != nil {
		t.Fatal(err)
	}

	e.cfg.Backend, e.cfg.OtherBackends = second, []isolation.Backend{first}
	e.m = e.start(t)
	if r := e.record(t, old.ID); r.State != store.StateRunning || r.Backend != "first" {
		t.Errorf("old sandbox after restart: %s on %q (%q), want running on first", r.State, r.Backend, r.Reason)
	}
	if err := e.m.Pause(context.Background(), old.ID, true); err != nil || !first.Instance(old.ID).Paused() {
		t.Errorf("pausing the adopted sandbox: %v; paused on its backend: %v", err, first.Instance(old.ID).Paused())
	}
	fresh := e.create(t, CreateRequest{})
	if r := e.record(t, fresh.ID); r.Backend != "second" || second.Instance(fresh.ID) == nil {
		t.Errorf("new sandbox on %q, want second", r.Backend)
	}
	if err := e.m.Kill(context.Background(), old.ID); err != nil {
		t.Errorf("killing the adopted sandbox: %v", err)
	}
	waitFor(t, 5*time.Second, "the adopted sandbox stopped after kill", first.Instance(old.ID).Stopped)

	if _, err := New(Config{Store: e.store, Templates: testTemplates, Backend: first, OtherBackends: []isolation.Backend{first}}); err == nil {
		t.Error("New accepted two backends with one name")
	}
}

// A template named in TemplateBackends starts on that backend, its pool
// members too, whatever the default; a failed start is cleaned up there.
func TestTemplateBackends(t *testing.T) {
	def := isolation.NewFakeNamed("default", isolation.Capabilities{Pause: true})
	mapped := isolation.NewFakeNamed("mapped", isolation.Capabilities{})
	e := newEnv(t, func(c *Config) {
		c.Backend, c.OtherBackends = def, []isolation.Backend{mapped}
		c.TemplateBackends = map[string]string{"base": "mapped"}
		c.WarmPools = map[string]PoolSize{"base": {Min: 1, Max: 1}}
	})
	def.Handle(EnvdPort, e.envd)
	mapped.Handle(EnvdPort, e.envd)
	sb := e.create(t, CreateRequest{})
	if r := e.record(t, sb.ID); r.Backend != "mapped" || mapped.Instance(sb.ID) == nil {
		t.Errorf("sandbox of base on %q, want mapped", r.Backend)
	}
	// The pool refills, on the mapped backend.
	for deadline := time.Now().Add(5 * time.Second); len(mapped.Running()) < 2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n, d := len(mapped.Running()), def.Running(); n < 2 || len(d) > 0 {
		t.Errorf("running: %d on mapped (want the sandbox and a pool member), %v on default (want none)", n, d)
	}
	// The mapped backend's capabilities are the ones that count.
	_, err := e.m.Create(context.Background(), CreateRequest{Template: "base", Timeout: time.Minute, AutoPause: true})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "mapped backend cannot pause") {
		t.Errorf("Create with autoPause = %v, want ErrInvalid naming the mapped backend", err)
	}
	if _, err := New(Config{Store: e.store, Templates: testTemplates, Backend: def, TemplateBackends: map[string]string{"base": "vm"}}); err == nil || !strings.Contains(err.Error(), `no backend "vm"`) {
		t.Errorf("New with a template on a backend it does not have = %v", err)
	}
}

// images is a template cache that makes an image per template.
type images map[string]string

func (im images) Ext4(_ context.Context, t *template.Template) (string, error) {
	if p, ok := im[t.ID]; ok {
		return p, nil
	}
	return "", errors.New("no image")
}

// A backend that boots from an image gets the template's in its Spec; one
// that mounts the directory gets none.
func TestRootImage(t *testing.T) {
	for _, tc := range []struct {
		name      string
		caps      isolation.Capabilities
		images    Images
		wantImage string
		wantErr   string
	}{
		{"directory", isolation.Capabilities{}, images{"base-0123456789ab": "/t/base.ext4"}, "", ""},
		{"image", isolation.Capabilities{RootImage: true}, images{"base-0123456789ab": "/t/base.ext4"}, "/t/base.ext4", ""},
		{"image, none made", isolation.Capabilities{RootImage: true}, images{}, "", "no image"},
		{"image, no cache", isolation.Capabilities{RootImage: true}, nil, "", "makes none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := isolation.NewFakeNamed("b", tc.caps)
			e := newEnv(t, func(c *Config) { c.Backend, c.Images = fake, tc.images })
			fake.Handle(EnvdPort, e.envd)
			sb, err := e.m.Create(context.Background(), CreateRequest{Template: "base", Timeout: time.Minute})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Create = %v, want an error saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			spec := fake.Instance(sb.ID).Spec()
			if spec.RootImage != tc.wantImage || spec.RootFS != testTemplates["base"].RootFS {
				t.Errorf("RootFS %q, RootImage %q; want %q, %q", spec.RootFS, spec.RootImage, testTemplates["base"].RootFS, tc.wantImage)
			}
		})
	}
}
