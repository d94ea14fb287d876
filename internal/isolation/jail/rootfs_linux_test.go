package jail

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The test rootfs is a few host binaries and their shared libraries (from
// ldd), an /etc/passwd with root and user (uid 1000), a setuid-root copy of
// id, and this test binary as /usr/bin/probe (see probeMain). Built once
// per test process; a debootstrap template is far too slow for unit tests.
var (
	rootfsOnce sync.Once
	rootfsDir  string
	rootfsErr  error
	envdOnce   sync.Once
	envdBin    string
	envdErr    error
	scratch    string // removed by TestMain
)

var rootfsBinaries = []string{
	"bash", "sh", "ls", "cat", "id", "ps", "sleep", "echo", "head", "tail", "dd",
	"mkdir", "touch", "stat", "grep", "wc", "uname", "true", "false", "env", "df", "rm", "sort", "tr",
}

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
	envdOnce.Do(func() {
		envdBin = filepath.Join(scratch, "envd")
		cmd := exec.Command("go", "build", "-o", envdBin, "github.com/agent-sandbox/agent-sandbox/cmd/envd")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			envdErr = fmt.Errorf("building envd: %v: %s", err, out)
		}
	})
	if envdErr != nil {
		t.Fatal(envdErr)
	}
	return envdBin
}

func buildRootfs(root string) (string, error) {
	for _, l := range [][2]string{{"usr/bin", "bin"}, {"usr/sbin", "sbin"}, {"usr/lib", "lib"}, {"usr/lib64", "lib64"}} {
		if err := os.MkdirAll(filepath.Join(root, l[0]), 0o755); err != nil {
			return "", err
		}
		if err := os.Symlink(l[0], filepath.Join(root, l[1])); err != nil {
			return "", err
		}
	}
	for _, d := range []string{"etc", "root", "home/user", "tmp", "proc", "sys", "dev", "var/tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return "", err
		}
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), 0o1777); err != nil {
		return "", err
	}
	if err := os.Chown(filepath.Join(root, "home/user"), 1000, 1000); err != nil {
		return "", err
	}
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\n",
		"etc/group":  "root:x:0:\ntty:x:5:\nuser:x:1000:\n",
		"etc/hosts":  "127.0.0.1 localhost\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			return "", err
		}
	}
	libs := map[string]bool{}
	add := func(src, dst string, mode os.FileMode) error {
		if err := copyFile(src, filepath.Join(root, dst), mode); err != nil {
			return err
		}
		return lddLibs(src, libs)
	}
	for _, b := range rootfsBinaries {
		p, err := exec.LookPath(b)
		if err != nil {
			return "", err
		}
		if err := add(p, "usr/bin/"+b, 0o755); err != nil {
			return "", err
		}
	}
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	if err := add(self, "usr/bin/probe", 0o755); err != nil {
		return "", err
	}
	idPath, _ := exec.LookPath("id")
	if err := add(idPath, "usr/bin/suid-id", os.ModeSetuid|0o755); err != nil {
		return "", err
	}
	for lib := range libs {
		if err := copyFile(lib, filepath.Join(root, lib), 0o755); err != nil {
			return "", err
		}
	}
	return root, nil
}

// lddLibs adds the absolute paths of bin's shared libraries to libs.
func lddLibs(bin string, libs map[string]bool) error {
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		if bytes.Contains(out, []byte("not a dynamic executable")) || len(out) == 0 {
			return nil // static
		}
		return fmt.Errorf("ldd %s: %w", bin, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		for _, f := range strings.Fields(sc.Text()) {
			if strings.HasPrefix(f, "/") {
				libs[f] = true
			}
		}
	}
	return nil
}

// copyFile copies src (following symlinks) to dst, unless dst exists.
func copyFile(src, dst string, mode os.FileMode) error {
	if _, err := os.Lstat(dst); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, mode) // setuid survives umask
}
