package sandboxtest

import (
	"log/slog"
	"net/netip"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/egress"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// stepPool is the address pool of the step sandboxes; other test
// packages use other prefixes, and the host lock keeps runs apart.
var stepPool = netip.MustParsePrefix("10.247.0.0/24")

// StepRunner returns a sandbox manager whose RunStep runs build steps in
// jail sandboxes that may reach what ceiling allows, resolving names with
// the host's resolver (the first nameserver of /etc/resolv.conf). It needs
// root and holds the host lock on sandbox networking until t ends;
// everything it made is removed then.
func StepRunner(t testing.TB, ceiling egress.Ceiling) *sandbox.Manager {
	t.Helper()
	return Start(t, Config{Name: "steptest", Pool: stepPool, BuildCeiling: &ceiling, LogLevel: slog.LevelWarn}).Manager
}
