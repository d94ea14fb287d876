package jail

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail/jailtest"
)

// The test rootfs is jailtest's, plus this test binary as /usr/bin/probe
// (see probeMain). Built once per test process.
var (
	rootfsOnce sync.Once
	rootfsDir  string
	rootfsErr  error
	envdOnce   sync.Once
	envdBin    string
	envdErr    error
	scratch    string // removed by TestMain
)

func testRootfs(t testing.TB) string {
	t.Helper()
	rootfsOnce.Do(func() { rootfsDir, rootfsErr = buildRootfs(filepath.Join(scratch, "rootfs")) })
	if rootfsErr != nil {
		t.Fatalf("building test rootfs: %v", rootfsErr)
	}
	return rootfsDir
}

func testEnvd(t testing.TB) string {
	t.Helper()
	envdOnce.Do(func() { envdBin, envdErr = jailtest.BuildEnvd(scratch) })
	if envdErr != nil {
		t.Fatal(envdErr)
	}
	return envdBin
}

func buildRootfs(root string) (string, error) {
	if err := jailtest.BuildRootfs(root); err != nil {
		return "", err
	}
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	if err := jailtest.AddBinary(root, self, "usr/bin/probe", 0o755); err != nil {
		return "", err
	}
	return root, nil
}
