package template

import (
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/template/oci"
)

func testSpec() Spec {
	return Spec{
		Name:     "demo",
		Suite:    "bookworm",
		Variant:  "minbase",
		Packages: []string{"sudo", "curl"},
		Steps: []Step{
			{User: &UserStep{Name: "user", UID: 1000, GID: 1000, Home: "/home/user", Shell: "/bin/bash", Groups: []string{"sudo"}}},
			{File: &FileStep{Path: "/etc/sudoers.d/user", Content: "user ALL=(ALL:ALL) NOPASSWD: ALL\n", Mode: 0o440}},
			{Dir: &DirStep{Path: "/code", Mode: 0o777}},
			{Symlink: &SymlinkStep{Path: "/usr/local/bin/py", Target: "/usr/bin/python3"}},
		},
		User:    "user",
		Workdir: "/home/user",
		Env:     map[string]string{"LANG": "C.UTF-8", "A": "1"},
	}
}

func TestHashStable(t *testing.T) {
	a, b := testSpec(), testSpec()
	// Same content, built differently: map insertion order, package
	// order and duplicates must not matter.
	b.Env = map[string]string{}
	b.Env["A"] = "1"
	b.Env["LANG"] = "C.UTF-8"
	b.Packages = []string{"curl", "sudo", "curl"}
	if a.Hash() != b.Hash() {
		t.Errorf("equal specs hash differently:\n%s\n%s", a.Hash(), b.Hash())
	}
	for range 10 { // map iteration order varies between runs of Hash
		if h := testSpec().Hash(); h != a.Hash() {
			t.Fatalf("hash is not deterministic: %s then %s", a.Hash(), h)
		}
	}
	// A nil and an empty env are the same spec.
	c, d := testSpec(), testSpec()
	c.Env, d.Env = nil, map[string]string{}
	if c.Hash() != d.Hash() {
		t.Error("nil and empty env hash differently")
	}
	// Golden: an accidental change of the encoding would silently rebuild
	// every cached template. Update deliberately, with BuilderVersion.
	const golden = "3dc9c49edbfdf4733461967d3ee75be01b37443c502de1f476a80cc80e95d0c8"
	if got := a.Hash(); got != golden {
		t.Errorf("hash of testSpec() = %s, want %s (encoding changed?)", got, golden)
	}
}

func TestHashChanges(t *testing.T) {
	base := testSpec().Hash()
	tests := []struct {
		name   string
		mutate func(*Spec)
	}{
		{"name", func(s *Spec) { s.Name = "other" }},
		{"suite", func(s *Spec) { s.Suite = "trixie" }},
		{"variant", func(s *Spec) { s.Variant = "" }},
		{"package added", func(s *Spec) { s.Packages = append(s.Packages, "git") }},
		{"package removed", func(s *Spec) { s.Packages = s.Packages[:1] }},
		{"step order", func(s *Spec) { s.Steps[2], s.Steps[3] = s.Steps[3], s.Steps[2] }},
		{"step removed", func(s *Spec) { s.Steps = s.Steps[:3] }},
		{"file mode", func(s *Spec) { s.Steps[1].File.Mode = 0o400 }},
		{"file content", func(s *Spec) { s.Steps[1].File.Content = "x\n" }},
		{"dir owner", func(s *Spec) { s.Steps[2].Dir.UID = 1000 }},
		{"user uid", func(s *Spec) { s.Steps[0].User.UID = 1001 }},
		{"user groups", func(s *Spec) { s.Steps[0].User.Groups = nil }},
		{"symlink target", func(s *Spec) { s.Steps[3].Symlink.Target = "/usr/bin/python" }},
		{"default user", func(s *Spec) { s.User = "root" }},
		{"workdir", func(s *Spec) { s.Workdir = "/root" }},
		{"env value", func(s *Spec) { s.Env["A"] = "2" }},
		{"env key", func(s *Spec) { s.Env["B"] = "1" }},
		{"cpu count", func(s *Spec) { s.CPUCount = 4 }},
		{"memory", func(s *Spec) { s.MemoryMB = 2048 }},
		{"disk write rate", func(s *Spec) { s.DiskIO.WriteMiBps = 50 }},
		{"disk read IOPS", func(s *Spec) { s.DiskIO.ReadIOPS = 500 }},
		{"recording", func(s *Spec) { s.Recording = "webm" }},
	}
	seen := map[string]string{base: "unchanged"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := testSpec()
			tt.mutate(&s)
			h := s.Hash()
			if prev, ok := seen[h]; ok {
				t.Errorf("hash %s equals the hash of %q", h, prev)
			}
			seen[h] = tt.name
		})
	}
}

func TestValidate(t *testing.T) {
	if err := testSpec().Validate(); err != nil {
		t.Fatalf("testSpec: %v", err)
	}
	for name, spec := range BuiltIn() {
		if spec.Name != name {
			t.Errorf("built-in %s has name %q", name, spec.Name)
		}
		if err := spec.Validate(); err != nil {
			t.Errorf("built-in %s: %v", name, err)
		}
	}
	if err := Base().Validate(); err != nil {
		t.Fatalf("Base: %v", err)
	}
	tests := []struct {
		name   string
		mutate func(*Spec)
		want   string
	}{
		{"empty name", func(s *Spec) { s.Name = "" }, "template name"},
		{"name with slash", func(s *Spec) { s.Name = "../x" }, "template name"},
		{"suite option", func(s *Spec) { s.Suite = "--foo" }, "suite"},
		{"variant", func(s *Spec) { s.Variant = "fakechroot" }, "variant"},
		{"package option", func(s *Spec) { s.Packages = []string{"-oDebug=1"} }, "package"},
		{"bad user", func(s *Spec) { s.User = "User Name" }, "user"},
		{"relative workdir", func(s *Spec) { s.Workdir = "home/user" }, "workdir"},
		{"env key", func(s *Spec) { s.Env["A=B"] = "1" }, "env"},
		{"empty step", func(s *Spec) { s.Steps = append(s.Steps, Step{}) }, "exactly one"},
		{"two kinds", func(s *Spec) { s.Steps[1].Dir = &DirStep{Path: "/x", Mode: 0o755} }, "exactly one"},
		{"dotdot path", func(s *Spec) { s.Steps[1].File.Path = "/etc/../../x" }, "clean absolute"},
		{"root path", func(s *Spec) { s.Steps[2].Dir.Path = "/" }, "clean absolute"},
		{"setuid mode", func(s *Spec) { s.Steps[1].File.Mode = 0o4755 | 1<<23 }, "permission bits"},
		{"negative uid", func(s *Spec) { s.Steps[2].Dir.UID = -1 }, "negative"},
		{"empty symlink target", func(s *Spec) { s.Steps[3].Symlink.Target = "" }, "target"},
		{"bad group", func(s *Spec) { s.Steps[0].User.Groups = []string{"a,b"} }, "group"},
		{"image and suite", func(s *Spec) { s.FromImage = "alpine:3.20" }, "Debian suite at once"},
		{"image and template", func(s *Spec) { *s = Spec{Name: "x", From: "base", FromImage: "alpine:3.20"} }, "from an image at once"},
		{"bad image", func(s *Spec) { *s = Spec{Name: "x", FromImage: "Alpine"} }, "image reference"},
		{"relative image tarball", func(s *Spec) { *s = Spec{Name: "x", FromImage: "oci-archive:x.tar"} }, "absolute path"},
		{"credentials without image", func(s *Spec) { s.RegistryAuth = &oci.Auth{Username: "u"} }, "registry credentials"},
		{"negative cpu count", func(s *Spec) { s.CPUCount = -1 }, "cpuCount -1 is negative"},
		{"negative memory", func(s *Spec) { s.MemoryMB = -5 }, "memoryMB -5 is negative"},
		{"negative disk rate", func(s *Spec) { s.DiskIO.WriteMiBps = -1 }, "diskIO.writeMiBps -1 is negative"},
		{"unknown recording format", func(s *Spec) { s.Recording = "gif" }, `template demo: recording: want mp4 or webm, got "gif"`},
		{"recording format in capitals", func(s *Spec) { s.Recording = "MP4" }, `recording: want mp4 or webm`},
	}
	for _, f := range []string{"mp4", "webm"} {
		s := testSpec()
		s.Recording = f
		if err := s.Validate(); err != nil {
			t.Errorf("spec recording %s: %v", f, err)
		}
	}
	// From an image, as from a template, user and workdir may be left to it.
	img := Spec{Name: "x", FromImage: "alpine:3.20", RegistryAuth: &oci.Auth{Username: "u", Password: "p"},
		Instructions: []Instruction{{Op: OpRun, Args: []string{"true"}}}}
	if err := img.Validate(); err != nil {
		t.Errorf("spec from an image: %v", err)
	}
	// Credentials are not part of what is built.
	anon := img
	anon.RegistryAuth = nil
	if img.Hash() != anon.Hash() {
		t.Error("registry credentials change the spec hash")
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := testSpec()
			tt.mutate(&s)
			err := s.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}

func TestBaseSpec(t *testing.T) {
	s := Base()
	for _, p := range []string{"python3", "python-is-python3", "nodejs", "npm", "git", "curl", "sudo",
		"procps", "iproute2", "ca-certificates", "ncurses-bin", "bash"} {
		found := false
		for _, q := range s.Packages {
			found = found || q == p
		}
		if !found {
			t.Errorf("base template does not install %s", p)
		}
	}
	if s.User != "user" || s.Workdir != "/home/user" {
		t.Errorf("base defaults = %s %s, want user /home/user", s.User, s.Workdir)
	}
	for _, p := range s.Packages {
		if strings.Contains(p, "envd") {
			t.Errorf("base installs %s; envd is bind-mounted, never part of a template", p)
		}
	}
	if got := ID("base", s.Hash()); !strings.HasPrefix(got, "base-") || len(got) != len("base-")+12 {
		t.Errorf("ID = %q, want base-<12 hex>", got)
	}
}
