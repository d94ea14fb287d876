package template

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Files that exist only while a template is being built.
const (
	// dpkg without fsync per file: the whole tree is synced once before the
	// completion marker is written, which is all the durability we need.
	unsafeIOConf = "etc/dpkg/dpkg.cfg.d/zz-agent-sandbox-unsafe-io"
	// Keeps package scripts from starting services in the chroot.
	policyRCD = "usr/sbin/policy-rc.d"
)

// preflight checks what a build needs: root, and debootstrap unless the
// template starts from another.
func preflight(debootstrap bool) error {
	if debootstrap {
		if _, err := debootstrapPath(); err != nil {
			return err
		}
	}
	if os.Geteuid() != 0 {
		return errors.New("building templates needs root (debootstrap, namespaces, mounts)")
	}
	return nil
}

// debootstrapDirs are searched when debootstrap is not on PATH: a service's
// PATH often lacks the sbin directories.
var debootstrapDirs = []string{"/usr/sbin", "/sbin"}

func debootstrapPath() (string, error) {
	if p, err := exec.LookPath("debootstrap"); err == nil {
		return p, nil
	}
	for _, d := range debootstrapDirs {
		p := filepath.Join(d, "debootstrap")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", ErrNoDebootstrap
}

// build builds spec into dir: debootstrapped, or on top of from when the
// spec has From. The caller holds dir's lock and has checked that dir
// holds no completed template.
func (b *Builder) build(ctx context.Context, spec Spec, from *Template, hash, dir, nonce string) (_ *Template, err error) {
	if from != nil {
		return b.buildDerived(ctx, spec, from, hash, dir, nonce)
	}
	start := time.Now()
	id := ID(spec.Name, hash)
	log := b.logger().With("template", id)
	stages := 3
	if len(spec.Packages) > 0 {
		stages++
	}
	rep := newReporter(b.Progress, spec.Name, stages, b.hook)

	buildRoot := filepath.Join(b.templatesDir(), ".build")
	if err := os.MkdirAll(buildRoot, 0o700); err != nil {
		return nil, err
	}
	prefix := spec.Name + "-" + hash[:12] + "-"
	if err := removeLeftovers(log, buildRoot, prefix, dir); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(buildRoot, prefix)
	if err != nil {
		return nil, err
	}
	if tmp, err = filepath.EvalSymlinks(tmp); err != nil { // mountinfo paths are resolved
		return nil, err
	}
	rootfs := filepath.Join(tmp, "rootfs")

	// Teardown, last pushed first: the chroot mounts, then anything still
	// mounted below tmp (a killed debootstrap's), then tmp itself.
	var undo, mounts cleanup
	undo.push("removing build directory "+tmp, func(context.Context) error {
		return errors.Join(sweepMounts(tmp), removeTree(tmp))
	})
	undo.push("unmounting chroot", mounts.run)
	defer func() {
		if cerr := undo.run(context.WithoutCancel(ctx)); cerr != nil {
			if err == nil {
				log.Warn("cleaning up after build", "err", cerr)
			} else {
				err = errors.Join(err, cerr)
			}
		}
		if err != nil {
			rep.finish("build failed after " + time.Since(start).Round(time.Second).String())
		}
	}()
	log.Info("building template", "suite", spec.Suite, "variant", spec.Variant,
		"packages", len(spec.Packages), "steps", len(spec.Steps), "dir", tmp)

	stage := func(name string, fn func() error) error {
		t0 := time.Now()
		rep.startStage(name)
		if err := fn(); err != nil {
			return err
		}
		log.Info("build stage done", "stage", name, "took", time.Since(t0).Round(time.Millisecond))
		return nil
	}

	if err := stage("bootstrap", func() error { return b.bootstrapRootfs(ctx, log, rep, rootfs, spec) }); err != nil {
		return nil, err
	}
	if err := mountChroot(rootfs, &mounts); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	if len(spec.Packages) > 0 {
		if err := stage("packages", func() error { return b.installPackages(ctx, log, rep, root, rootfs, spec) }); err != nil {
			return nil, err
		}
	}
	if err := stage("steps", func() error { return applySteps(ctx, log, rep, root, rootfs, spec.Steps) }); err != nil {
		return nil, err
	}

	var t *Template
	err = stage("finish", func() error {
		if err := mounts.run(context.WithoutCancel(ctx)); err != nil {
			return err
		}
		if err := sweepMounts(tmp); err != nil {
			return err
		}
		if err := finalize(root, spec, id, hash); err != nil {
			return fmt.Errorf("finalizing root filesystem: %w", err)
		}
		size, _, err := diskUsage(rootfs)
		if err != nil {
			return fmt.Errorf("measuring root filesystem: %w", err)
		}
		if err := syncFS(rootfs); err != nil {
			return fmt.Errorf("syncing root filesystem: %w", err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := os.Rename(rootfs, filepath.Join(dir, "rootfs")); err != nil {
			return fmt.Errorf("moving root filesystem into place: %w", err)
		}
		t = &Template{
			Name: spec.Name, ID: id, Hash: hash, RootFS: filepath.Join(dir, "rootfs"),
			User: spec.User, Workdir: spec.Workdir, Env: spec.Env,
			BuiltAt: time.Now().UTC(), BuildDuration: time.Since(start).Round(time.Millisecond),
			SizeBytes: size, BuilderVersion: BuilderVersion, Spec: spec,
		}
		if err := writeMeta(dir, t); err != nil {
			return errors.Join(fmt.Errorf("writing template metadata: %w", err), removeTree(dir))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	log.Info("template built", "took", t.BuildDuration, "size_bytes", t.SizeBytes, "rootfs", t.RootFS)
	rep.finish(fmt.Sprintf("built %s in %s (%s)", id, t.BuildDuration.Round(time.Second), humanBytes(t.SizeBytes)))
	return t, nil
}

// removeLeftovers removes what builds of this spec that died left behind:
// build directories with our prefix and an unfinished version directory.
// The caller holds the spec's lock, so none of it is in use.
func removeLeftovers(log *slog.Logger, buildRoot, prefix, dir string) error {
	entries, err := os.ReadDir(buildRoot)
	if err != nil {
		return err
	}
	var stale []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			stale = append(stale, filepath.Join(buildRoot, e.Name()))
		}
	}
	if _, err := os.Lstat(dir); err == nil {
		stale = append(stale, dir)
	}
	for _, p := range stale {
		log.Warn("removing leftover of an interrupted build", "dir", p)
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return err
		}
		if err := errors.Join(sweepMounts(real), removeTree(real)); err != nil {
			return fmt.Errorf("removing leftover build %s: %w", p, err)
		}
	}
	return nil
}

// bootstrapRootfs runs debootstrap into rootfs.
func (b *Builder) bootstrapRootfs(ctx context.Context, log *slog.Logger, rep *reporter, rootfs string, spec Spec) error {
	// debootstrap accepts a target that exists; dpkg reads this file from
	// the first package it installs on.
	if err := os.MkdirAll(filepath.Join(rootfs, filepath.Dir(unsafeIOConf)), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(rootfs, unsafeIOConf), []byte("force-unsafe-io\n"), 0o644); err != nil {
		return err
	}
	if b.bootstrap != nil {
		return b.bootstrap(ctx, rootfs, spec)
	}
	path, err := debootstrapPath()
	if err != nil {
		return err
	}
	// Downloaded .debs are kept for the next build (debootstrap fetches
	// them one by one, which is slow) and validated on reuse. Builds share
	// the directory, so they take turns.
	cacheDir := filepath.Join(b.templatesDir(), ".cache", "debs")
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return err
	}
	unlock, err := lockFile(ctx, cacheDir+".lock")
	if err != nil {
		return fmt.Errorf("locking package cache: %w", err)
	}
	defer unlock()

	args := []string{"--components=main", "--cache-dir=" + cacheDir}
	if spec.Variant != "" {
		args = append(args, "--variant="+spec.Variant)
	}
	args = append(args, spec.Suite, rootfs, b.mirror())
	var dp debootstrapProgress
	err = command{
		name: "debootstrap", path: path, args: args, env: hostEnv(),
		cancel: syscall.SIGINT, // debootstrap traps INT and unmounts what it mounted
		output: func(line string) {
			if ev, ok := dp.line(line); ok {
				rep.update(ev)
			}
			if w, ok := strings.CutPrefix(line, "W: "); ok {
				log.Warn("debootstrap", "warning", w)
			}
		},
	}.run(ctx, log)
	if err != nil && ctx.Err() == nil {
		if t := fileTail(filepath.Join(rootfs, "debootstrap", "debootstrap.log"), 15); t != "" {
			err = fmt.Errorf("%w\n  debootstrap.log ends:\n  %s", err, strings.ReplaceAll(t, "\n", "\n  "))
		}
	}
	// debootstrap unmounts its /proc and /sys unless it was killed.
	return errors.Join(err, sweepMounts(rootfs))
}

// installPackages installs spec.Packages with apt-get in the chroot.
func (b *Builder) installPackages(ctx context.Context, log *slog.Logger, rep *reporter, root *os.Root, rootfs string, spec Spec) error {
	resolv, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return fmt.Errorf("reading host resolv.conf: %w", err)
	}
	for _, f := range []struct {
		name    string
		content string
		mode    fs.FileMode
	}{
		{"etc/resolv.conf", string(resolv), 0o644},
		{"etc/apt/sources.list", sourcesList(b.mirror(), spec.Suite), 0o644},
		{policyRCD, "#!/bin/sh\nexit 101\n", 0o755},
	} {
		if err := replaceFile(root, f.name, []byte(f.content), f.mode, 0, 0); err != nil {
			return fmt.Errorf("preparing apt: %w", err)
		}
	}
	var ap aptProgress
	update := command{
		name: "apt-get update", path: "/usr/bin/apt-get", chroot: rootfs, env: chrootEnv(),
		args: []string{"-q", "-o", "APT::Status-Fd=3", "update"},
		status: func(line string) {
			if _, ok := parseAptStatus(line); ok {
				rep.update(Event{Phase: "updating index", Percent: -1})
			}
		},
	}
	if err := update.run(ctx, log); err != nil {
		return err
	}
	install := command{
		name: "apt-get install", path: "/usr/bin/apt-get", chroot: rootfs, env: chrootEnv(),
		args: append([]string{"-q", "-y", "--no-install-recommends",
			"-o", "APT::Status-Fd=3",
			"-o", "Dpkg::Progress-Fancy=0",
			"-o", "Dpkg::Use-Pty=0",
			"-o", "Dpkg::Options::=--force-confdef",
			"-o", "Dpkg::Options::=--force-confold",
			"install"}, spec.Packages...),
		output: ap.output,
		status: func(line string) {
			if ev, ok := ap.status(line); ok {
				rep.update(ev)
			}
			if st, ok := parseAptStatus(line); ok && st.Kind == "pmerror" {
				log.Warn("dpkg error", "package", st.Item, "msg", st.Message)
			}
		},
	}
	return install.run(ctx, log)
}

func sourcesList(mirror, suite string) string {
	return "deb " + mirror + " " + suite + " main\n"
}

func applySteps(ctx context.Context, log *slog.Logger, rep *reporter, root *os.Root, rootfs string, steps []Step) error {
	for i, st := range steps {
		rep.update(Event{Phase: "running", Done: i, Total: len(steps),
			Percent: 100 * float64(i) / float64(len(steps)), Item: st.String()})
		var err error
		switch {
		case st.User != nil:
			err = addUser(ctx, log, rootfs, st.User)
		case st.File != nil:
			err = applyFile(root, st.File)
		case st.Dir != nil:
			err = applyDir(root, st.Dir)
		case st.Symlink != nil:
			err = applySymlink(root, st.Symlink)
		}
		if err != nil {
			return fmt.Errorf("step %d (%s): %w", i+1, st, err)
		}
	}
	rep.update(Event{Phase: "done", Done: len(steps), Total: len(steps), Percent: 100})
	return nil
}

// addUser creates the user and its primary group with the shadow tools of
// the rootfs itself, and deletes the password.
func addUser(ctx context.Context, log *slog.Logger, rootfs string, u *UserStep) error {
	useradd := []string{
		"--uid", strconv.Itoa(u.UID), "--gid", strconv.Itoa(u.GID),
		"--create-home", "--home-dir", u.Home, "--shell", u.Shell,
	}
	if len(u.Groups) > 0 {
		useradd = append(useradd, "--groups", strings.Join(u.Groups, ","))
	}
	for _, c := range []command{
		{name: "groupadd", path: "/usr/sbin/groupadd", args: []string{"--gid", strconv.Itoa(u.GID), u.Name}},
		{name: "useradd", path: "/usr/sbin/useradd", args: append(useradd, u.Name)},
		{name: "passwd --delete", path: "/usr/bin/passwd", args: []string{"--delete", u.Name}},
	} {
		c.chroot, c.env = rootfs, chrootEnv()
		if err := c.run(ctx, log); err != nil {
			return err
		}
	}
	return nil
}

// finalize removes the build's scaffolding and caches from the rootfs and
// writes the files that identify the template.
func finalize(root *os.Root, spec Spec, id, hash string) error {
	for _, name := range []string{unsafeIOConf, policyRCD} {
		if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := root.RemoveAll("debootstrap"); err != nil {
		return err
	}
	if err := clearDir(root, "var/cache/apt/archives", "partial", "lock"); err != nil {
		return err
	}
	if err := clearDir(root, "var/cache/apt/archives/partial"); err != nil {
		return err
	}
	if err := clearDir(root, "var/cache/apt", "archives"); err != nil {
		return err
	}
	if err := clearDir(root, "var/lib/apt/lists", "partial", "lock"); err != nil {
		return err
	}
	files := []struct{ name, content string }{
		// The sandbox runtime provides name resolution; never ship the
		// build host's.
		{"etc/resolv.conf", ""},
		{".e2b", fmt.Sprintf("ENV_ID=%s\nTEMPLATE_ID=%s\nBUILD_ID=%s\n", id, id, hash)},
	}
	if spec.Suite != "" { // a derived template keeps its base's
		files = append(files, struct{ name, content string }{"etc/apt/sources.list", sourcesList(DefaultMirror, spec.Suite)})
	}
	for _, f := range files {
		if err := replaceFile(root, f.name, []byte(f.content), 0o644, 0, 0); err != nil {
			return err
		}
	}
	if ok, err := hasUser(root, spec.User); err != nil {
		return err
	} else if !ok && spec.FromImage != "" {
		return fmt.Errorf("default user %q has no /etc/passwd entry in the image; add one with a RUN step or start from another image", spec.User)
	} else if !ok {
		return fmt.Errorf("default user %q does not exist in the root filesystem (add a user step)", spec.User)
	}
	if fi, err := root.Stat(cmp.Or(rel(spec.Workdir), ".")); err != nil || !fi.IsDir() {
		return fmt.Errorf("default workdir %s is not a directory in the root filesystem", spec.Workdir)
	}
	return nil
}

// diskUsage returns the bytes allocated to the tree at dir and the number
// of its entries, counting hard links once.
func diskUsage(dir string) (bytesUsed, entries int64, err error) {
	seen := map[[2]uint64]bool{}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		if st.Nlink > 1 && !d.IsDir() {
			key := [2]uint64{st.Dev, st.Ino}
			if seen[key] {
				return nil
			}
			seen[key] = true
		}
		entries++
		bytesUsed += st.Blocks * 512
		return nil
	})
	return bytesUsed, entries, err
}

func syncFS(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

// fileTail returns the last n lines of a file, or "" if it cannot be read.
func fileTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%d KiB", n>>10)
	}
}
