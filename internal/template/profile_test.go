package template

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLeanProfile sources LeanProfile in bash and in sh with an id(1) on
// PATH that leaves a mark: bash must not run it, sh must (it has no
// $EUID), and both must end with Debian's PATH for this user.
func TestLeanProfile(t *testing.T) {
	dir := t.TempDir()
	profile := filepath.Join(dir, "profile")
	if err := os.WriteFile(profile, []byte(LeanProfile), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bin")
	mark := filepath.Join(dir, "id-ran")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	fakeID := "#!/bin/sh\necho ran >>" + mark + "\nexec /usr/bin/id \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "id"), []byte(fakeID), 0o755); err != nil {
		t.Fatal(err)
	}
	wantPath := "/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games"
	if os.Geteuid() == 0 {
		wantPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	for _, tc := range []struct {
		shell   string
		wantIDs int // runs of id
	}{
		{"/bin/bash", 0},
		{"/bin/sh", 1},
	} {
		t.Run(filepath.Base(tc.shell), func(t *testing.T) {
			_ = os.Remove(mark)
			cmd := exec.Command(tc.shell, "-c", `. "$1"; echo "$PATH"`, tc.shell, profile)
			cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("sourcing the profile: %v\n%s", err, out)
			}
			if got := strings.TrimSpace(string(out)); got != wantPath {
				t.Errorf("PATH = %q, want %q", got, wantPath)
			}
			runs := 0
			if b, err := os.ReadFile(mark); err == nil {
				runs = strings.Count(string(b), "ran")
			}
			if runs != tc.wantIDs {
				t.Errorf("id ran %d times, want %d", runs, tc.wantIDs)
			}
		})
	}
}
