package testenv

import (
	"bufio"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// skipCall matches a call of testing's Skip, Skipf or SkipNow.
var skipCall = regexp.MustCompile(`\.Skip(f|Now)?\(`)

// ciExempt marks a skip that is not a missing requirement.
const ciExempt = "not a ci requirement"

// TestSkipsAreRequirements enforces the package's rule over the module:
// outside this package, a test skips only through Require (or RequireRoot),
// which fails under CI, or says in a comment just above the skip why it is
// "not a CI requirement".
func TestSkipsAreRequirements(t *testing.T) {
	root := moduleRoot(t)
	self, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "testdata", "gen":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || filepath.Dir(path) == self {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		for _, line := range bareSkips(t, path) {
			t.Errorf("%s:%d: %s\n\tskips without testenv.Require: route it through testenv.Require (it then fails under CI), "+
				"or say in a comment just above it why it is \"not a CI requirement\"", rel, line.n, strings.TrimSpace(line.text))
		}
		checked++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked %d Go files under %s: not the module", checked, root)
	}
}

type numberedLine struct {
	n    int
	text string
}

// bareSkips returns the lines of the Go file at path that call Skip,
// Skipf or SkipNow without the exemption in the comment lines right above.
func bareSkips(t *testing.T, path string) []numberedLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var bare []numberedLine
	var comment []string // the comment lines right above the current line
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "//") {
			comment = append(comment, line)
			continue
		}
		if skipCall.MatchString(line) && !strings.Contains(strings.ToLower(strings.Join(comment, " ")), ciExempt) {
			bare = append(bare, numberedLine{n, line})
		}
		comment = comment[:0]
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return bare
}

// moduleRoot is the directory of go.mod above the working directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}
