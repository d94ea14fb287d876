package envd

import (
	"slices"
	"strings"
	"testing"
)

func TestParseExecAs(t *testing.T) {
	s, err := parseExecAs([]string{"-uid", "1000", "-gid", "0", "-groups", "27,100", "-dir", "/w", "-env", "A=1", "-env", "B=x=y", "-merge-output", "--", "/bin/sh", "-c", "id"})
	if err != nil {
		t.Fatal(err)
	}
	if s.uid != 1000 || s.gid != 0 || !slices.Equal(s.groups, []uint32{27, 100}) || s.dir != "/w" ||
		!slices.Equal(s.env, []string{"A=1", "B=x=y"}) || !s.merge || !slices.Equal(s.argv, []string{"/bin/sh", "-c", "id"}) {
		t.Errorf("parsed %+v", s)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no command", []string{"-uid", "1"}, "absolute command"},
		{"relative command", []string{"--", "sh"}, "absolute command"},
		{"relative dir", []string{"-dir", "w", "--", "/bin/sh"}, "absolute command"},
		{"bad env", []string{"-env", "A", "--", "/bin/sh"}, "want K=V"},
		{"bad groups", []string{"-groups", "a", "--", "/bin/sh"}, "-groups"},
		{"uid too large", []string{"-uid", "4294967296", "--", "/bin/sh"}, "out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := parseExecAs(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("parseExecAs(%q) = %v, want an error saying %q", tc.args, err, tc.want)
			}
		})
	}
}
