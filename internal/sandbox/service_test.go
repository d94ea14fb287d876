package sandbox

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/envd/envdtest"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

// serviceEnv is an env whose template "svc" has start command start and
// spec changes from mod, served by a real envd (in-process: commands run
// on this host).
func serviceEnv(t *testing.T, mod func(*template.Spec)) *env {
	t.Helper()
	e := newEnv(t, nil)
	real, _ := envdtest.New(t, "")
	mux := http.NewServeMux()
	mux.Handle("/init", e.envd)
	mux.Handle("/health", e.envd)
	mux.Handle("/", real)
	e.fake.Handle(EnvdPort, mux)
	svc := *testTemplates["base"]
	svc.Name, svc.ID = "svc", "svc-0123456789ab"
	mod(&svc.Spec)
	e.cfg.Templates = fakeTemplates{"svc": &svc}
	e.m.Close()
	e.m = e.start(t)
	return e
}

// A ready command is polled after the start command: the create returns
// once it exits 0, and fails naming it when the start command fails first.
func TestStartServiceReadyCmd(t *testing.T) {
	testenv.RequireRoot(t) // the commands run as root
	marker := filepath.Join(t.TempDir(), "ready")
	e := serviceEnv(t, func(s *template.Spec) {
		s.StartCmd = "sleep 0.5; touch " + marker + "; sleep 60"
		s.ReadyCmd = "[ -f " + marker + " ]"
	})
	t0 := time.Now()
	e.create(t, CreateRequest{Template: "svc", Timeout: time.Minute})
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("create returned after %s before the ready command could succeed: %v", time.Since(t0), err)
	}

	e = serviceEnv(t, func(s *template.Spec) {
		s.StartCmd = "exit 7"
		s.ReadyCmd = "false"
	})
	_, err := e.m.Create(t.Context(), CreateRequest{Template: "svc", Timeout: time.Minute})
	if want := `waiting for the ready command "false": the start command exited with code 7`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Create = %v, want an error saying %q", err, want)
	}
}

// TestStartService creates a sandbox of a template with a start command:
// the command runs through envd (a real one, in-process: on this host) as
// root, and the create waits for the ready port.
func TestStartService(t *testing.T) {
	testenv.RequireRoot(t) // the start command runs as root
	marker := filepath.Join(t.TempDir(), "started")
	e := serviceEnv(t, func(s *template.Spec) {
		s.StartCmd = "id -un > " + marker
		s.ReadyPort = 8765
	})
	e.fake.Handle(8765, http.NotFoundHandler()) // the service's port, open

	e.create(t, CreateRequest{Template: "svc", Timeout: time.Minute})
	var got []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if got, _ = os.ReadFile(marker); len(got) > 0 {
			break
		}
	}
	if strings.TrimSpace(string(got)) != "root" {
		t.Errorf("start command wrote %q, want root", got)
	}
}
