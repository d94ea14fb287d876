package sandboxtest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail/jailtest"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// CAFile is where the probe template holds the test Internet's CA.
const CAFile = "/etc/test-ca.pem"

// File is a file the probe template holds besides.
type File struct {
	Path string // in the sandbox
	Data []byte
	Mode os.FileMode
}

// probeTemplate makes the template "probe" under the stack's directory:
// a small root filesystem (jailtest.BuildRootfs) with the running test
// binary at /usr/bin/probe, with the shared libraries it needs (a -race
// binary has some), the test Internet's CA and files. Its sandboxes'
// default user is "user" in /home/user.
func (s *Stack) probeTemplate(t testing.TB, files []File) *template.Template {
	t.Helper()
	rootfs := filepath.Join(s.Dir, "probe", "rootfs")
	if err := jailtest.BuildRootfs(rootfs); err != nil {
		t.Fatalf("building the probe template's rootfs: %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := jailtest.AddBinary(rootfs, self, "usr/bin/probe", 0o755); err != nil {
		t.Fatalf("adding the probe: %v", err)
	}
	if s.Internet != nil {
		files = append(files, File{Path: CAFile, Data: s.Internet.CACert, Mode: 0o644})
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(rootfs, f.Path), f.Data, f.Mode); err != nil {
			t.Fatalf("adding %s to the probe template: %v", f.Path, err)
		}
	}
	return &template.Template{Name: "probe", ID: "probe-00000000000", RootFS: rootfs, User: "user", Workdir: "/home/user"}
}
