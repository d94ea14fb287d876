// Package envdtest runs a real envd in-process for other packages' tests. It
// is imported only by tests, so it never ships in the envd binary.
package envdtest

import (
	"log/slog"
	"os/user"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/envd"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/state"
)

// New returns an envd initialised with accessToken, closed when the test
// ends, and its default user. The default user is whoever runs the test, so
// the tests work unprivileged too; a fresh HOME keeps the host's shell
// start-up files (which may be slow, or wait on locks) out of login shells.
func New(t testing.TB, accessToken string) (srv *envd.Server, defaultUser string) {
	t.Helper()
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	st := state.New(state.Defaults{User: me.Username})
	st.Apply(state.Update{AccessToken: accessToken, EnvVars: map[string]string{"HOME": t.TempDir()}})
	srv = envd.NewServer(st, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { srv.Close() })
	return srv, me.Username
}
