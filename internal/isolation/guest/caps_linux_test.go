package guest

import (
	"math/bits"
	"strings"
	"testing"
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
