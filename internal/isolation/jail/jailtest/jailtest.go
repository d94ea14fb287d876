// Package jailtest holds what tests that start real sandboxes need: a small
// root filesystem built from host binaries, envd and the vm backend's init
// built from this module, and the cgroup directories to clean up. It is
// imported only by tests, so it never ships in a binary.
package jailtest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/cgroup"
)

// Binaries are the host binaries BuildRootfs copies into /usr/bin.
var Binaries = []string{
	"bash", "sh", "ls", "cat", "id", "ps", "sleep", "echo", "head", "tail", "dd",
	"mkdir", "touch", "stat", "grep", "wc", "uname", "true", "false", "env", "df", "rm", "sort", "tr", "chown", "ln",
	"nproc",
}

// BuildRootfs makes a root filesystem in root: Binaries and their shared
// libraries (from ldd), a setuid-root copy of id as /usr/bin/suid-id, and an
// /etc/passwd with root and user (uid 1000, home /home/user). A debootstrap
// template is far too slow for unit tests.
func BuildRootfs(root string) error {
	for _, l := range [][2]string{{"usr/bin", "bin"}, {"usr/sbin", "sbin"}, {"usr/lib", "lib"}, {"usr/lib64", "lib64"}} {
		if err := os.MkdirAll(filepath.Join(root, l[0]), 0o755); err != nil {
			return err
		}
		if err := os.Symlink(l[0], filepath.Join(root, l[1])); err != nil {
			return err
		}
	}
	for _, d := range []string{"etc", "root", "home/user", "tmp", "proc", "sys", "dev", "var/tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), os.ModeSticky|0o777); err != nil {
		return err
	}
	if err := os.Chown(filepath.Join(root, "home/user"), 1000, 1000); err != nil {
		return err
	}
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\n",
		"etc/group":  "root:x:0:\ntty:x:5:\nuser:x:1000:\n",
		"etc/hosts":  "127.0.0.1 localhost\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	for _, b := range Binaries {
		p, err := exec.LookPath(b)
		if err != nil {
			return err
		}
		if err := AddBinary(root, p, "usr/bin/"+b, 0o755); err != nil {
			return err
		}
	}
	idPath, _ := exec.LookPath("id")
	return AddBinary(root, idPath, "usr/bin/suid-id", os.ModeSetuid|0o755)
}

// AddBinary copies the host binary src to dst (relative to root) with mode,
// and its shared libraries to the same paths under root. Files that exist
// already are kept.
func AddBinary(root, src, dst string, mode os.FileMode) error {
	if err := copyFile(src, filepath.Join(root, dst), mode); err != nil {
		return err
	}
	libs := map[string]bool{}
	if err := lddLibs(src, libs); err != nil {
		return err
	}
	for lib := range libs {
		if err := copyFile(lib, filepath.Join(root, lib), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// CgroupParentDirs returns the parent group's directory in each hierarchy a
// sandbox group may live in. Under v1 that is every mounted hierarchy, not
// only the controllers we configure: runsc also makes its groups under
// devices and the named systemd hierarchy.
func CgroupParentDirs(parent string) []string {
	mode, err := cgroup.Detect()
	if err != nil {
		return nil
	}
	if mode == cgroup.V2 {
		return []string{filepath.Join(cgroup.Root, parent)}
	}
	hierarchies, _ := os.ReadDir(cgroup.Root)
	var dirs []string
	for _, h := range hierarchies {
		dirs = append(dirs, filepath.Join(cgroup.Root, h.Name(), parent))
	}
	return dirs
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

// copyFile copies src (following symlinks) to dst with mode, unless dst
// exists.
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

// BuildEnvd builds envd (static, as sandboxes need it) into dir and returns
// its path.
func BuildEnvd(dir string) (string, error) { return BuildCommand(dir, "envd") }

// BuildCommand builds the project's command cmd/<name> (static, as
// sandboxes need it) into dir and returns its path.
func BuildCommand(dir, name string) (string, error) {
	p := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", p, "github.com/agent-sandbox/agent-sandbox/cmd/"+name)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %v: %s", name, err, out)
	}
	return p, nil
}
