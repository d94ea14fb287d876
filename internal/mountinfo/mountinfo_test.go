package mountinfo

import (
	"slices"
	"testing"
)

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/plain`:             "/plain",
		`/with\040space`:     "/with space",
		`/tab\011and\134bs`:  "/tab\tand\\bs",
		`/not\08an\escape\1`: `/not\08an\escape\1`,
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestUnderRootFirstIsDeepest(t *testing.T) {
	ms, err := Under("/")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(ms, "/") || ms[len(ms)-1] != "/" {
		t.Fatalf("Under(/) = %v: want / among them, last", ms)
	}
	if !slices.Contains(ms, "/proc") {
		t.Errorf("Under(/) = %v: no /proc", ms)
	}
}
