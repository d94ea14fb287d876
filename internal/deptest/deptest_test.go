package deptest

import (
	"fmt"
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps Check's complaints.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestCheck runs Check on this package, which links only the standard
// library and itself: allowed, then with itself left out of the list.
func TestCheck(t *testing.T) {
	self := module + "/internal/deptest"
	ok := &recorder{TB: t}
	Check(ok, []string{module}, []string{self})
	if len(ok.errs) > 0 {
		t.Errorf("Check with everything allowed: %q", ok.errs)
	}
	bad := &recorder{TB: t}
	Check(bad, []string{module}, []string{})
	if len(bad.errs) != 1 || !strings.Contains(bad.errs[0], self) {
		t.Errorf("Check with this package not allowed: %q, want one complaint naming it", bad.errs)
	}
}
