package sandbox

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/envd/envdtest"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

// TestStartService creates a sandbox of a template with a start command:
// the command runs through envd (a real one, in-process: on this host) as
// root, and the create waits for the ready port.
func TestStartService(t *testing.T) {
	testenv.RequireRoot(t) // the start command runs as root
	marker := filepath.Join(t.TempDir(), "started")
	e := newEnv(t, nil)
	real, _ := envdtest.New(t, "")
	mux := http.NewServeMux()
	mux.Handle("/init", e.envd)
	mux.Handle("/health", e.envd)
	mux.Handle("/", real)
	e.fake.Handle(EnvdPort, mux)
	e.fake.Handle(8765, http.NotFoundHandler()) // the service's port, open

	svc := *testTemplates["base"]
	svc.Name, svc.ID = "svc", "svc-0123456789ab"
	svc.Spec.StartCmd = "id -un > " + marker
	svc.Spec.ReadyPort = 8765
	e.cfg.Templates = fakeTemplates{"svc": &svc}
	e.m.Close()
	e.m = e.start(t)

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
