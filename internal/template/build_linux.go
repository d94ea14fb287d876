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
	// Keeps package scripts from starting services in a package step.
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

// build builds spec into dir on top of from, or of a debootstrapped
// Debian system when the spec has no From. The caller holds dir's lock and
// has checked that dir holds no completed template.
func (b *Builder) build(ctx context.Context, spec Spec, from *Template, hash, dir, nonce string) (*Template, error) {
	if b.BuildTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, b.BuildTimeout,
			fmt.Errorf("%w: the build ran past its timeout of %s", context.DeadlineExceeded, b.BuildTimeout))
		defer cancel()
	}
	start := time.Now()
	log := b.logger().With("template", ID(spec.Name, hash))
	stages := len(spec.Instructions) + 1
	if len(spec.Packages) > 0 {
		stages++
	}
	stages += len(stepGroups(spec.Steps))
	if from == nil {
		stages++
	}
	rep := newReporter(b.Progress, spec.Name, stages, b.OnProgress)
	t, err := func() (*Template, error) {
		if from == nil {
			var err error
			if from, err = b.bootstrapLayer(ctx, log, rep, spec); err != nil {
				return nil, err
			}
		}
		return b.buildDerived(ctx, log, rep, spec, from, hash, dir, nonce, start)
	}()
	if err != nil {
		rep.finish("build failed after " + time.Since(start).Round(time.Millisecond).String())
		return nil, err
	}
	return t, nil
}

// bootstrapLayer returns the Debian system spec's packages and steps are
// installed on, as the template they start from: the layer debootstrap
// made of spec's suite and variant from the mirror, made first unless the
// step cache has it. debootstrap runs on the host (see bootstrapRootfs);
// everything after it runs in sandboxes.
func (b *Builder) bootstrapLayer(ctx context.Context, log *slog.Logger, rep *reporter, spec Spec) (*Template, error) {
	key := hashStrings(fmt.Sprintf("agent-sandbox layer v%d", layerVersion), "debootstrap", spec.Suite, spec.Variant, b.mirror())
	rep.startStage("bootstrap")
	if b.hasLayer(key) {
		log.Info("debootstrapped system cached", "suite", spec.Suite, "variant", spec.Variant)
		rep.update(Event{Phase: "cached", Percent: 100})
	} else {
		t0 := time.Now()
		log.Info("debootstrapping", "suite", spec.Suite, "variant", spec.Variant, "mirror", b.mirror())
		err := b.layer(ctx, &imageState{}, key, "debootstrap "+spec.Suite, func(rootfs, _, _ string) error {
			return b.bootstrapRootfs(ctx, log, rep, rootfs, spec)
		})
		if err != nil {
			return nil, err
		}
		log.Info("build stage done", "stage", "bootstrap", "took", time.Since(t0).Round(time.Millisecond))
	}
	name := "debian-" + spec.Suite
	return &Template{Name: name, ID: ID(name, key), Hash: key, RootFS: b.layerDiff(key)}, nil
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

// bootstrapRootfs runs debootstrap into rootfs and prepares it for apt.
func (b *Builder) bootstrapRootfs(ctx context.Context, log *slog.Logger, rep *reporter, rootfs string, spec Spec) error {
	bootstrap := b.bootstrap
	if bootstrap == nil {
		bootstrap = func(ctx context.Context, rootfs string, spec Spec) error {
			return b.debootstrap(ctx, log, rep, rootfs, spec)
		}
	}
	// debootstrap accepts a target that exists; dpkg reads this file from
	// the first package it installs on.
	if err := os.MkdirAll(filepath.Join(rootfs, filepath.Dir(unsafeIOConf)), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(rootfs, unsafeIOConf), []byte("force-unsafe-io\n"), 0o644); err != nil {
		return err
	}
	if err := bootstrap(ctx, rootfs, spec); err != nil {
		return err
	}
	// What apt in the package step needs: the mirror, and no services
	// started by package scripts. finalize removes or replaces both.
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, f := range []struct {
		name    string
		content string
		mode    fs.FileMode
	}{
		{"etc/apt/sources.list", sourcesList(b.mirror(), spec.Suite), 0o644},
		{policyRCD, "#!/bin/sh\nexit 101\n", 0o755},
	} {
		if err := replaceFile(root, f.name, []byte(f.content), f.mode, 0, 0); err != nil {
			return fmt.Errorf("preparing apt: %w", err)
		}
	}
	return nil
}

// debootstrap runs debootstrap into rootfs, on the host: it fetches from
// the configured mirror only, and its second stage runs the packages'
// maintainer scripts chrooted into rootfs as host root (docs/SECURITY.md).
func (b *Builder) debootstrap(ctx context.Context, log *slog.Logger, rep *reporter, rootfs string, spec Spec) error {
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

func sourcesList(mirror, suite string) string {
	return "deb " + mirror + " " + suite + " main\n"
}

// applyFileSteps applies steps that are not user steps to the tree root.
func applyFileSteps(rep *reporter, root *os.Root, first int, steps []Step) error {
	for i, st := range steps {
		rep.update(Event{Phase: "running", Done: i, Total: len(steps),
			Percent: 100 * float64(i) / float64(len(steps)), Item: st.String()})
		var err error
		switch {
		case st.File != nil:
			err = applyFile(root, st.File)
		case st.Dir != nil:
			err = applyDir(root, st.Dir)
		case st.Symlink != nil:
			err = applySymlink(root, st.Symlink)
		default:
			err = errors.New("not a file, directory or symlink step")
		}
		if err != nil {
			return fmt.Errorf("step %d (%s): %w", first+i+1, st, err)
		}
	}
	rep.update(Event{Phase: "done", Done: len(steps), Total: len(steps), Percent: 100})
	return nil
}

// userCommand is the command of a user step: it creates the user and its
// primary group with the image's own shadow tools, and deletes the
// password. The values are positional parameters, never shell text.
func userCommand(u *UserStep) []string {
	groups := strings.Join(u.Groups, ",")
	script := `groupadd --gid "$2" "$1" && ` +
		`useradd --uid "$3" --gid "$2" --create-home --home-dir "$4" --shell "$5" ${6:+--groups "$6"} "$1" && ` +
		`passwd --delete "$1"`
	return []string{"/bin/sh", "-c", script, "sh", u.Name, strconv.Itoa(u.GID), strconv.Itoa(u.UID), u.Home, u.Shell, groups}
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
