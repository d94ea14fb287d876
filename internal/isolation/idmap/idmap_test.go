package idmap

import (
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// withDelegations points the subuid/subgid files at content for the test.
func withDelegations(t *testing.T, subuid, subgid string) {
	t.Helper()
	dir := t.TempDir()
	u, g := filepath.Join(dir, "subuid"), filepath.Join(dir, "subgid")
	for f, c := range map[string]string{u: subuid, g: subgid} {
		if err := os.WriteFile(f, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	oldU, oldG := subuidFile, subgidFile
	subuidFile, subgidFile = u, g
	t.Cleanup(func() { subuidFile, subgidFile = oldU, oldG })
}

// testBase is far above what this host's live user namespaces map, so the
// tests see only their own reservations.
const testBase = 3_000_000_000

func TestAllocateDisjointAndReleased(t *testing.T) {
	withDelegations(t, "", "")
	a, err := NewAllocator(t.TempDir(), testBase)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[string]uint32{}
	var wg sync.WaitGroup
	for _, id := range []string{"a", "b", "c", "d"} {
		wg.Go(func() {
			base, err := a.Allocate(id)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			got[id] = base
			mu.Unlock()
		})
	}
	wg.Wait()
	var bases []uint32
	for _, b := range got {
		bases = append(bases, b)
	}
	slices.Sort(bases)
	want := []uint32{testBase, testBase + Size, testBase + 2*Size, testBase + 3*Size}
	if !slices.Equal(bases, want) {
		t.Fatalf("bases %v, want %v", bases, want)
	}
	if err := a.Release("b"); err != nil {
		t.Fatal(err)
	}
	if err := a.Release("b"); err != nil {
		t.Errorf("second Release: %v", err)
	}
	// The freed range is the lowest free one again.
	if base, err := a.Allocate("e"); err != nil || base != got["b"] {
		t.Errorf("after releasing b: Allocate = %d, %v; want %d", base, err, got["b"])
	}
}

func TestAllocateSkipsDelegatedAndOtherServers(t *testing.T) {
	// Ranges delegated in subuid or subgid (overlapping only partly, too)
	// are skipped.
	withDelegations(t,
		"# comment\nuser:3000000000:65536\nbroken line\n",
		"dockremap:3000131072:10\n")
	dir := t.TempDir()
	a, err := NewAllocator(dir, testBase)
	if err != nil {
		t.Fatal(err)
	}
	// Another server on the host shares the reservation directory.
	other, err := NewAllocator(dir, testBase)
	if err != nil {
		t.Fatal(err)
	}
	b1, err := a.Allocate("x")
	if err != nil {
		t.Fatal(err)
	}
	b2, err := other.Allocate("y")
	if err != nil {
		t.Fatal(err)
	}
	if b1 != testBase+Size || b2 != testBase+3*Size {
		t.Errorf("bases %d and %d, want %d and %d", b1, b2, testBase+Size, testBase+3*Size)
	}
}

func TestReserve(t *testing.T) {
	withDelegations(t, "", "")
	a, err := NewAllocator(t.TempDir(), testBase)
	if err != nil {
		t.Fatal(err)
	}
	// After a restart, the sandbox keeps the range it runs with.
	if err := a.Reserve("x", testBase+5*Size); err != nil {
		t.Fatal(err)
	}
	if err := a.Reserve("x", testBase+5*Size); err != nil {
		t.Errorf("Reserve again by its holder: %v", err)
	}
	if err := a.Reserve("y", testBase+5*Size); err == nil {
		t.Error("Reserve of a range another sandbox holds succeeded")
	}
	for range 5 {
		if b, err := a.Allocate("z"); err != nil || b == testBase+5*Size {
			t.Fatalf("Allocate = %d, %v: handed out a reserved range", b, err)
		}
	}
}

func TestCheckBase(t *testing.T) {
	for base, ok := range map[uint32]bool{0: false, 1000: false, Size - 1: false, Size: true, DefaultBase: true, maxBase: true, maxBase + 1: false} {
		if err := CheckBase(base); (err == nil) != ok {
			t.Errorf("CheckBase(%d) = %v", base, err)
		}
	}
}

func TestParseMap(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []span
	}{
		{"         0          0 4294967295\n", nil}, // the initial namespace
		{"         0     165536      65536\n", []span{{165536, 65536}}},
		{"0 1000 1\n1 100000 65536\n", []span{{1000, 1}, {100000, 65536}}},
		{"junk\n0 x 1\n", nil},
	} {
		if got := parseMap(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("parseMap(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
