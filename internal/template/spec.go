package template

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/recording"
	"github.com/agent-sandbox/agent-sandbox/internal/template/oci"
)

// BuilderVersion is mixed into every spec hash. Bump it whenever the build
// pipeline changes what ends up in a root filesystem, so that cached
// templates built by an older pipeline are rebuilt rather than reused.
const BuilderVersion = 1

// Spec describes a template: where its root filesystem comes from, what is
// installed into it, and the defaults sandboxes started from it inherit.
// Its [Spec.Hash] is the cache key.
type Spec struct {
	// Name is the template name: lower-case letters, digits, '.', '_', '-'.
	Name string `json:"name"`
	// From names the template this one starts from; its root filesystem
	// replaces the debootstrap of Suite, which must then be empty.
	From string `json:"from,omitempty"`
	// FromImage names an OCI image to start from instead, unpacked once
	// per image digest: a registry reference ("python:3.12",
	// "ghcr.io/org/repo:tag") or a tarball ("docker-archive:/abs/img.tar",
	// "oci-archive:/abs/img.tar"); see package oci. Like a From template,
	// it gives the defaults a spec leaves empty (user, workdir, env).
	FromImage string `json:"fromImage,omitempty"`
	// RegistryAuth, when set, is sent to FromImage's registry. It is kept
	// out of the hash and the stored metadata: the image digest already
	// names what was pulled, and a password must not reach the disk.
	RegistryAuth *oci.Auth `json:"-"`
	// Suite is the Debian suite handed to debootstrap, e.g. "bookworm".
	Suite string `json:"suite,omitempty"`
	// Variant is the debootstrap variant ("minbase", "buildd"); empty means
	// debootstrap's default (priority required + important).
	Variant string `json:"variant,omitempty"`
	// Packages are installed with apt-get (without recommends) after
	// debootstrap. Order does not matter; duplicates are ignored.
	Packages []string `json:"packages,omitempty"`
	// Steps run in order after the packages are installed.
	Steps []Step `json:"steps,omitempty"`
	// Instructions run in order after Steps, each inside a sandbox of the
	// image built so far.
	Instructions []Instruction `json:"instructions,omitempty"`

	// User is the default process user of sandboxes ("user").
	User string `json:"user"`
	// Workdir is the default working directory ("/home/user").
	Workdir string `json:"workdir"`
	// Env is the default environment of every process in a sandbox.
	Env map[string]string `json:"env,omitempty"`
	// BandwidthMbit caps each of the template's sandboxes each way when
	// the create request does not (network.bandwidth); 0 leaves the
	// server's default. The server's limit bounds it either way.
	BandwidthMbit float64 `json:"bandwidthMbit,omitempty"`
	// CPUCount and MemoryMB are what every sandbox of the template gets
	// (E2B's template resources); 0 leaves the server's default. The
	// server's maxima bound them: a template above one is refused (at
	// build through the API, at create), never lowered.
	CPUCount int `json:"cpuCount,omitempty"`
	MemoryMB int `json:"memoryMB,omitempty"`
	// DiskIO caps each of the template's sandboxes' I/O on its own disk;
	// a zero field leaves the server's default, and the server's maxima
	// bound it as they do CPUCount.
	DiskIO DiskIO `json:"diskIO,omitzero"`
	// StartCmd, when set, runs in every sandbox of the template once envd
	// is initialised (bash -l -c, as root, in the background): the
	// template's service, such as the code interpreter server.
	StartCmd string `json:"startCmd,omitempty"`
	// ReadyPort, when set, is where that service listens: a create
	// returns only once something in the sandbox accepts connections there.
	ReadyPort int `json:"readyPort,omitempty"`
	// ReadyCmd, when set, is a shell command (bash -l -c, as root) that
	// exits 0 once a sandbox of the template is ready, such as what the
	// Template SDK's waitForURL, waitForFile or waitForProcess produce. It
	// is polled after the start command, at build (the template is only
	// built when it succeeds within Builder.ReadyTimeout, as E2B's builder
	// checks it) and in every new sandbox (a create returns once it
	// succeeds). It and ReadyPort are alternatives.
	ReadyCmd string `json:"readyCmd,omitempty"`
	// Recording, when set, is the format ("mp4" or "webm") of a
	// recording of its display that every sandbox of the template starts
	// with and that runs until it is stopped (package recording): it
	// begins once the display is up. Like the resources, and unlike the
	// start command, a template built from this one does not inherit it.
	Recording string `json:"recording,omitempty"`
}

// DiskIO is a disk I/O quota per sandbox, each way, in MiB/s and I/O
// operations/s. Zero fields leave the server's defaults.
type DiskIO struct {
	ReadMiBps  int `json:"readMiBps,omitempty"`
	WriteMiBps int `json:"writeMiBps,omitempty"`
	ReadIOPS   int `json:"readIOPS,omitempty"`
	WriteIOPS  int `json:"writeIOPS,omitempty"`
}

// Step is one declarative post-install step. Exactly one field is set.
type Step struct {
	User    *UserStep    `json:"user,omitempty"`
	File    *FileStep    `json:"file,omitempty"`
	Dir     *DirStep     `json:"dir,omitempty"`
	Symlink *SymlinkStep `json:"symlink,omitempty"`
}

// UserStep creates a user and its primary group (the image's useradd, in a
// build step sandbox), creates its home from /etc/skel and deletes its
// password.
type UserStep struct {
	Name  string `json:"name"`
	UID   int    `json:"uid"`
	GID   int    `json:"gid"`
	Home  string `json:"home"`
	Shell string `json:"shell"`
	// Groups are supplementary groups; they must already exist.
	Groups []string `json:"groups,omitempty"`
}

// FileStep writes a regular file, replacing any existing one.
type FileStep struct {
	Path    string      `json:"path"`
	Content string      `json:"content"`
	Mode    fs.FileMode `json:"mode"`
	UID     int         `json:"uid,omitempty"`
	GID     int         `json:"gid,omitempty"`
}

// DirStep creates a directory (and missing parents) or sets the mode and
// owner of an existing one.
type DirStep struct {
	Path string      `json:"path"`
	Mode fs.FileMode `json:"mode"`
	UID  int         `json:"uid,omitempty"`
	GID  int         `json:"gid,omitempty"`
}

// SymlinkStep creates the symlink Path pointing at Target, replacing an
// existing non-directory at Path.
type SymlinkStep struct {
	Path   string `json:"path"`
	Target string `json:"target"`
}

// String describes s for progress output and error messages.
func (s Step) String() string {
	switch {
	case s.User != nil:
		return "create user " + s.User.Name
	case s.File != nil:
		return "write " + s.File.Path
	case s.Dir != nil:
		return "make directory " + s.Dir.Path
	case s.Symlink != nil:
		return "symlink " + s.Symlink.Path + " -> " + s.Symlink.Target
	}
	return "empty step"
}

var (
	nameRE    = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	idRE      = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}-[0-9a-f]{12}$`)
	suiteRE   = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)
	packageRE = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)
	userRE    = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
	envKeyRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

var variants = []string{"", "minbase", "buildd"}

// Validate reports the first problem with s. Everything that reaches a
// command line or a path is checked here, so no field can smuggle in an
// option or escape the root filesystem.
func (s Spec) Validate() error {
	if !nameRE.MatchString(s.Name) {
		return fmt.Errorf("template name %q: want 1-63 of [a-z0-9._-], starting with a letter or digit", s.Name)
	}
	derived := s.From != "" || s.FromImage != ""
	switch {
	case s.From != "" && s.FromImage != "":
		return fmt.Errorf("template %s: from a template and from an image at once", s.Name)
	case derived && (s.Suite != "" || s.Variant != ""):
		return fmt.Errorf("template %s: from a template or image and from a Debian suite at once", s.Name)
	case s.FromImage != "":
		if err := oci.CheckRef(s.FromImage); err != nil {
			return fmt.Errorf("template %s: from image: %w", s.Name, err)
		}
	case s.From != "":
		if !nameRE.MatchString(s.From) && !idRE.MatchString(s.From) || s.From == s.Name {
			return fmt.Errorf("template %s: from %q is not another template's name or ID", s.Name, s.From)
		}
	default:
		if !suiteRE.MatchString(s.Suite) {
			return fmt.Errorf("template %s: suite %q is not a Debian suite name", s.Name, s.Suite)
		}
		if !slices.Contains(variants, s.Variant) {
			return fmt.Errorf("template %s: debootstrap variant %q: want one of minbase, buildd or empty", s.Name, s.Variant)
		}
		if len(s.Instructions) > 0 {
			return fmt.Errorf("template %s: instructions need a template or image to start from (From, FromImage); build the Debian system as a template of its own", s.Name)
		}
	}
	if s.RegistryAuth != nil && s.FromImage == "" {
		return fmt.Errorf("template %s: registry credentials without an image to pull", s.Name)
	}
	for _, p := range s.Packages {
		if !packageRE.MatchString(p) {
			return fmt.Errorf("template %s: package %q is not a Debian package name", s.Name, p)
		}
	}
	// From a template or image, an empty user or workdir is its own.
	if !userRE.MatchString(s.User) && (!derived || s.User != "") {
		return fmt.Errorf("template %s: user %q is not a valid user name", s.Name, s.User)
	}
	if err := checkPath(s.Workdir); err != nil && (!derived || s.Workdir != "") {
		return fmt.Errorf("template %s: workdir: %w", s.Name, err)
	}
	for k := range s.Env {
		if !envKeyRE.MatchString(k) {
			return fmt.Errorf("template %s: env name %q is not valid", s.Name, k)
		}
	}
	if s.ReadyPort < 0 || s.ReadyPort > 65535 || (s.ReadyPort != 0 && s.StartCmd == "") {
		return fmt.Errorf("template %s: ready port %d: want 1-65535, with a start command", s.Name, s.ReadyPort)
	}
	if s.ReadyCmd != "" && s.ReadyPort != 0 {
		return fmt.Errorf("template %s: a ready port and a ready command at once: give one", s.Name)
	}
	if strings.ContainsRune(s.StartCmd, 0) || strings.ContainsRune(s.ReadyCmd, 0) {
		return fmt.Errorf("template %s: the start or ready command contains a NUL byte", s.Name)
	}
	if s.Recording != "" {
		if err := recording.CheckFormat(s.Recording); err != nil {
			return fmt.Errorf("template %s: recording: %w", s.Name, err)
		}
	}
	if s.BandwidthMbit < 0 {
		return fmt.Errorf("template %s: bandwidth %g Mbit/s is negative", s.Name, s.BandwidthMbit)
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"cpuCount", s.CPUCount}, {"memoryMB", s.MemoryMB},
		{"diskIO.readMiBps", s.DiskIO.ReadMiBps}, {"diskIO.writeMiBps", s.DiskIO.WriteMiBps},
		{"diskIO.readIOPS", s.DiskIO.ReadIOPS}, {"diskIO.writeIOPS", s.DiskIO.WriteIOPS},
	} {
		if f.v < 0 {
			return fmt.Errorf("template %s: %s %d is negative", s.Name, f.name, f.v)
		}
	}
	for i, st := range s.Steps {
		if err := st.validate(); err != nil {
			return fmt.Errorf("template %s: step %d (%s): %w", s.Name, i+1, st, err)
		}
	}
	for i, in := range s.Instructions {
		if err := in.Validate(); err != nil {
			return fmt.Errorf("template %s: instruction %d (%s): %w", s.Name, i+1, in, err)
		}
	}
	return nil
}

func (s Step) validate() error {
	n := 0
	for _, set := range []bool{s.User != nil, s.File != nil, s.Dir != nil, s.Symlink != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return errors.New("exactly one of user, file, dir, symlink must be set")
	}
	switch {
	case s.User != nil:
		u := s.User
		if !userRE.MatchString(u.Name) {
			return fmt.Errorf("user name %q is not valid", u.Name)
		}
		if u.UID < 0 || u.GID < 0 {
			return errors.New("negative uid or gid")
		}
		if err := checkPath(u.Home); err != nil {
			return fmt.Errorf("home: %w", err)
		}
		if err := checkPath(u.Shell); err != nil {
			return fmt.Errorf("shell: %w", err)
		}
		for _, g := range u.Groups {
			if !userRE.MatchString(g) {
				return fmt.Errorf("group name %q is not valid", g)
			}
		}
	case s.File != nil:
		if err := checkPath(s.File.Path); err != nil {
			return err
		}
		return checkMode(s.File.Mode, s.File.UID, s.File.GID)
	case s.Dir != nil:
		if err := checkPath(s.Dir.Path); err != nil {
			return err
		}
		return checkMode(s.Dir.Mode, s.Dir.UID, s.Dir.GID)
	case s.Symlink != nil:
		if err := checkPath(s.Symlink.Path); err != nil {
			return err
		}
		if s.Symlink.Target == "" || strings.ContainsRune(s.Symlink.Target, 0) {
			return errors.New("empty symlink target")
		}
	}
	return nil
}

// checkPath accepts clean absolute paths other than "/".
func checkPath(p string) error {
	if p == "" || p[0] != '/' || path.Clean(p) != p || p == "/" || strings.ContainsRune(p, 0) {
		return fmt.Errorf("path %q: want a clean absolute path below /", p)
	}
	return nil
}

func checkMode(m fs.FileMode, uid, gid int) error {
	if m&^fs.ModePerm != 0 {
		return fmt.Errorf("mode %v: only permission bits are allowed", m)
	}
	if uid < 0 || gid < 0 {
		return errors.New("negative uid or gid")
	}
	return nil
}

// Hash returns the hex SHA-256 of the canonical JSON encoding of s together
// with [BuilderVersion]. Package order and duplicates do not matter; step
// order does. Fields are encoded with omitempty where a zero value is the
// default, so adding such a field later leaves existing hashes unchanged.
func (s Spec) Hash() string {
	c := s
	c.Packages = slices.Compact(slices.Sorted(slices.Values(s.Packages)))
	if len(c.Env) == 0 {
		c.Env = nil
	}
	b, err := json.Marshal(c)
	if err != nil {
		// A Spec is plain strings, ints and maps of strings: encoding
		// cannot fail.
		panic(fmt.Sprintf("encoding template spec: %v", err))
	}
	h := sha256.New()
	fmt.Fprintf(h, "agent-sandbox template builder v%d\n", BuilderVersion)
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// ID returns the template ID for a spec with this name and hash: the name
// and the first 12 hex digits of the hash.
func ID(name, hash string) string {
	if len(hash) > 12 {
		hash = hash[:12]
	}
	return name + "-" + hash
}
