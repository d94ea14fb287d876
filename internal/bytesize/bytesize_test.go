package bytesize

import "testing"

func TestFormat(t *testing.T) {
	for n, want := range map[uint64]string{
		0: "0B", 100: "100B", 1023: "1023B", 1024: "1KiB", 1536 << 20: "1.5GiB",
		4 << 30: "4GiB", 1<<30 - 1: "1024MiB", 1<<30 + 1: "1GiB", 3 << 40: "3TiB",
	} {
		if got := Format(n); got != want {
			t.Errorf("Format(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestParse(t *testing.T) {
	for s, want := range map[string]uint64{
		"0": 0, "100": 100, "100B": 100, "1KiB": 1024, "512MiB": 512 << 20, "4GiB": 4 << 30,
		"1.5GiB": 1536 << 20, "2G": 2 << 30, "3gib": 3 << 30, "1TiB": 1 << 40, "1k": 1024,
	} {
		if got, err := Parse(s); err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v, want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "GiB", "-1GiB", "1XiB", "1 GiB extra", "1e400", "NaN", "1GB2", "1iB", "1KKB", " 1GiB"} {
		if got, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) = %d, want an error", s, got)
		}
	}
	// What Format writes, Parse reads back.
	for _, n := range []uint64{0, 100, 1 << 20, 4 << 30, 1536 << 20} {
		if got, err := Parse(Format(n)); err != nil || got != n {
			t.Errorf("Parse(Format(%d)) = %d, %v", n, got, err)
		}
	}
}
