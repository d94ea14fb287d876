package guest

import (
	"fmt"
	"math/bits"
	"os"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

func TestKeptCapNames(t *testing.T) {
	names := KeptCapNames()
	if n := bits.OnesCount64(KeptCapsMask()); len(names) != n {
		t.Errorf("%d names for a mask of %d capabilities", len(names), n)
	}
	for _, n := range names {
		if !strings.HasPrefix(n, "CAP_") || strings.ToUpper(n) != n {
			t.Errorf("capability name %q is not as OCI specs name them", n)
		}
	}
}

// TestProbeLastCap checks the probe against the kernel's own answer.
func TestProbeLastCap(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	testenv.Require(t, err == nil, fmt.Sprintf("the kernel's cap_last_cap: %v", err))
	if got, want := probeLastCap(), strings.TrimSpace(string(b)); fmt.Sprint(got) != want {
		t.Errorf("probeLastCap() = %d, cap_last_cap says %s", got, want)
	}
}
