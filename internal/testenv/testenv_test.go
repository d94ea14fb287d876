package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// requireChildEnv makes TestRequire the child that calls Require.
const requireChildEnv = "TESTENV_REQUIRE_CHILD"

// TestRequire runs a test that lacks what it requires in a child process:
// it must skip with the reason on a laptop and fail with it under CI=true.
func TestRequire(t *testing.T) {
	if os.Getenv(requireChildEnv) == "1" {
		Require(t, true, "never shown")
		Require(t, false, "test needs a unicorn")
		t.Error("Require(t, false, ...) returned")
		return
	}
	for _, tc := range []struct {
		name, ci string
		want     []string
		exitCode int
	}{
		{"laptop", "", []string{"--- SKIP: TestRequire", "skipping: test needs a unicorn"}, 0},
		{"CI", "true", []string{"--- FAIL: TestRequire", "test needs a unicorn; CI must provide"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestRequire$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), requireChildEnv+"=1", "CI="+tc.ci)
			out, err := cmd.CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.exitCode {
				t.Errorf("CI=%q: exit code %d, want %d", tc.ci, code, tc.exitCode)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("CI=%q: output lacks %q:\n%s", tc.ci, w, out)
				}
			}
			if strings.Contains(string(out), "never shown") || strings.Contains(string(out), "Require(t, false, ...) returned") {
				t.Errorf("CI=%q: Require went on where it should not have:\n%s", tc.ci, out)
			}
		})
	}
}
