package guest

import (
	"strings"
	"testing"
)

func TestCopyLines(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", "", ""},
		{"lines", "a\nb\n", "envd: a\nenvd: b\n"},
		{"unterminated", "a\nb", "envd: a\nenvd: b\n"},
		{"forged", "vminit: envd exited\n", "envd: vminit: envd exited\n"},
		{"long", strings.Repeat("x", 5000) + "\n", "envd: " + strings.Repeat("x", 5000) + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			CopyLines(&out, strings.NewReader(tc.in), "envd: ")
			if out.String() != tc.want {
				t.Errorf("CopyLines(%q) = %q, want %q", tc.in, out.String(), tc.want)
			}
		})
	}
}
