package sandbox

import (
	"cmp"
	"context"

	"github.com/agent-sandbox/agent-sandbox/gen/process/processconnect"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/recording"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// startRecording starts, in the sandbox rec whose envd inst has just
// initialised, the recording of its display that every sandbox of tmpl
// makes (Spec.Recording): one that begins when the display comes up
// (@e2b/desktop starts Xvfb after the create), so nothing shown on it is
// missed, and runs until it is stopped through the API or the sandbox
// ends. It is the recorder the API's recording routes use, as the same
// user, so they find and stop it.
func (m *Manager) startRecording(ctx context.Context, inst isolation.Instance, rec store.Sandbox, tmpl *template.Template) error {
	e := envdConn{
		client: processconnect.NewProcessClient(envdClient(inst), envdURL),
		user:   cmp.Or(tmpl.User, defaultUser),
		token:  rec.EnvdAccessToken,
	}
	env := map[string]string{"DISPLAY": template.DesktopDisplay}
	r, err := recording.New(func(ctx context.Context, args ...string) ([]byte, error) {
		return e.output(ctx, env, args...)
	}, template.DesktopDisplay).Await(ctx, tmpl.Spec.Recording)
	if err != nil {
		return err
	}
	m.sandboxLog(rec.ID).Info("recording its display, as its template asks", "recording_id", r.ID, "path", r.Path)
	return nil
}
