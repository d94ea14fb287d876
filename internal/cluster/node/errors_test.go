package node

import (
	"errors"
	"fmt"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/cluster/v1alpha1"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// TestErrorClass: a failed create's class, and the error a replica answers
// it with (the node's message), stand for the manager's error the node
// met, wrapped or not; a failure of the node's own has none.
func TestErrorClass(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want v1alpha1.SandboxErrorClass
	}{
		{"invalid", fmt.Errorf("%w: template 'x' not found", sandbox.ErrInvalid), v1alpha1.ErrorInvalid},
		{"conflict", fmt.Errorf("%w: a sandbox with ID x exists already", sandbox.ErrConflict), v1alpha1.ErrorConflict},
		{"limit", fmt.Errorf("admitting: %w", sandbox.ErrLimit), v1alpha1.ErrorLimit},
		{"unavailable", sandbox.ErrUnavailable, v1alpha1.ErrorUnavailable},
		{"the node's", errors.New("mounting the rootfs: no space left on device"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ErrorClass(tc.err)
			if got != tc.want {
				t.Fatalf("ErrorClass(%v) = %q, want %q", tc.err, got, tc.want)
			}
			back := ClassError(got, tc.err.Error())
			if tc.want == "" {
				if back != nil {
					t.Fatalf("ClassError(%q) = %v, want nil", got, back)
				}
				return
			}
			if back.Error() != tc.err.Error() {
				t.Fatalf("ClassError(%q) says %q, want the node's %q", got, back, tc.err)
			}
			for _, c := range errorClasses {
				if errors.Is(back, c.err) != errors.Is(tc.err, c.err) {
					t.Fatalf("ClassError(%q) is %v: %t, the node's error: %t", got, c.err, errors.Is(back, c.err), errors.Is(tc.err, c.err))
				}
			}
		})
	}
	if err := ClassError("Unknown", "r"); err != nil {
		t.Fatalf("ClassError of an unknown class = %v, want nil", err)
	}
}
