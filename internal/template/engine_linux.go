package template

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A template built From another is a chain of layers over the other's
// root filesystem. Each step that changes files (RUN, COPY, the spec's
// Packages and Steps) leaves one layer: the upper directory of the overlay
// it ran on, holding only what it changed (deletions as overlayfs
// whiteouts). Layers live in the step cache under their key and are never
// changed; a build whose key is cached takes the layer instead of running
// the step. ENV, WORKDIR and USER only change the state later steps run
// with, which their keys include.
//
// The finished template is still one plain directory, as sandboxes expect:
// the layers are flattened into it with hard links (files are shared with
// the layers and with the From template, only directories are new), so a
// template costs little more disk than what its steps added.
//
//	templates/.layers/<key>/diff         the step's changes
//	templates/.layers/<key>/layer.json   metadata, written last: the completion marker
//	templates/.layers/<key>.lock         flock held while the step runs
//	templates/.layers/.tmp/<key16>-*     a step in progress

// layerMeta is what layer.json records about a cached layer.
type layerMeta struct {
	Key     string        `json:"key"`
	Parent  string        `json:"parent"`
	Step    string        `json:"step"`
	Created time.Time     `json:"created"`
	Took    time.Duration `json:"took"`
}

const layerMetaFile = "layer.json"

func (b *Builder) layersDir() string { return filepath.Join(b.templatesDir(), ".layers") }

func (b *Builder) layerDiff(key string) string { return filepath.Join(b.layersDir(), key, "diff") }

func (b *Builder) hasLayer(key string) bool {
	_, err := os.Stat(filepath.Join(b.layersDir(), key, layerMetaFile))
	return err == nil
}

// imageState is what the steps so far have made: the layers (bottom
// first, over from.RootFS) and the settings later steps run with.
type imageState struct {
	from    *Template
	key     string   // cache key of the image so far
	layers  []string // diff directories, bottom first
	user    string   // USER for RUN; root unless set, as in Docker
	workdir string   // WORKDIR for RUN and relative COPY destinations
	env     map[string]string
	// cached is true while every step so far came from the cache.
	cached bool
	// finalUser and finalWorkdir are the template's defaults: the last
	// USER or WORKDIR, else the spec's, else the From template's.
	finalUser, finalWorkdir string
}

// lower returns the overlay lower directories, top first.
func (s *imageState) lower() []string {
	l := []string{s.from.RootFS}
	for _, d := range s.layers {
		l = append([]string{d}, l...)
	}
	return l
}

// readFile reads a file of the image (relative path) from the topmost
// layer that has it. Whiteouts are not consulted: it is for /etc/passwd
// and /etc/group, which a build does not delete.
func (s *imageState) readFile(name string) ([]byte, error) {
	for _, dir := range s.lower() {
		r, err := os.OpenRoot(dir)
		if err != nil {
			return nil, err
		}
		data, err := r.ReadFile(name)
		r.Close()
		if err == nil || !errors.Is(err, fs.ErrNotExist) {
			return data, err
		}
	}
	return nil, fs.ErrNotExist
}

// runEnv is the environment of a RUN: the accumulated ENV over a default
// PATH, and HOME from the user's passwd entry unless ENV set it.
func (s *imageState) runEnv(home string) []string {
	env := map[string]string{"PATH": strings.TrimPrefix(pathEnv, "PATH=")}
	if home == "" {
		home = "/"
	}
	env["HOME"] = home
	maps.Copy(env, s.env)
	var out []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// buildDerived builds spec on top of from into dir, reporting to rep; the
// build began at start. The caller holds dir's lock and has checked that
// dir holds no completed template.
func (b *Builder) buildDerived(ctx context.Context, log *slog.Logger, rep *reporter, spec Spec, from *Template, hash, dir, nonce string, start time.Time) (_ *Template, err error) {
	id := ID(spec.Name, hash)
	log.Info("building template", "from", from.ID, "packages", len(spec.Packages),
		"steps", len(spec.Steps), "instructions", len(spec.Instructions))

	st := &imageState{
		from: from, key: rootKey(from.Hash), user: "root", workdir: "/", cached: true,
		env:       map[string]string{},
		finalUser: cmp.Or(spec.User, from.User), finalWorkdir: cmp.Or(spec.Workdir, from.Workdir),
	}
	maps.Copy(st.env, from.Env)
	maps.Copy(st.env, spec.Env)

	if len(spec.Packages) > 0 {
		rep.startStage("packages")
		in := Instruction{Op: OpRun, Args: []string{aptInstallCommand(spec.Packages)}}
		key := packagesKey(st.key, spec.Packages)
		if err := b.runLayer(ctx, log, rep, st, key, 0, in); err != nil {
			return nil, fmt.Errorf("installing packages: %w", err)
		}
	}
	first := 0
	for _, group := range stepGroups(spec.Steps) {
		rep.startStage("steps")
		key := stepsKey(st.key, group)
		if err := b.stepsLayer(ctx, log, rep, st, key, first, group); err != nil {
			return nil, fmt.Errorf("applying steps: %w", err)
		}
		first += len(group)
	}
	forced := false
	for i, in := range spec.Instructions {
		step := i + 1
		rep.startStage(shorten(in.String(), 60))
		log.Info(in.String(), "step", step)
		forced = forced || in.Force
		n := ""
		if forced {
			n = nonce
		}
		key := instructionKey(st.key, in, n)
		if err := b.instruction(ctx, log, rep, st, key, step, in); err != nil {
			var se *StepError
			if !errors.As(err, &se) {
				err = &StepError{Step: step, Instruction: in, ExitCode: -1, Err: err}
			}
			log.Error("step failed", "step", step, "err", err)
			return nil, err
		}
	}

	rep.startStage("finish")
	tmpRoot := filepath.Join(b.templatesDir(), ".build")
	if err := os.MkdirAll(tmpRoot, 0o700); err != nil {
		return nil, err
	}
	prefix := spec.Name + "-" + hash[:12] + "-"
	if err := removeLeftovers(log, tmpRoot, prefix, dir); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(tmpRoot, prefix)
	if err != nil {
		return nil, err
	}
	defer func() {
		if rerr := removeTree(tmp); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	final := spec
	final.User, final.Workdir, final.Env = st.finalUser, st.finalWorkdir, st.env
	// A template that sets none of them runs its From's, as E2B's does.
	if final.StartCmd == "" && final.ReadyPort == 0 && final.ReadyCmd == "" {
		final.StartCmd, final.ReadyPort, final.ReadyCmd = from.Spec.StartCmd, from.Spec.ReadyPort, from.Spec.ReadyCmd
	}
	if final.ReadyCmd != "" {
		if err := b.checkReady(ctx, log, rep, st, final, filepath.Join(tmp, "ready")); err != nil {
			return nil, err
		}
	}
	rootfs := filepath.Join(tmp, "rootfs")
	t0 := time.Now()
	if err := flatten(rootfs, append([]string{from.RootFS}, st.layers...)); err != nil {
		return nil, fmt.Errorf("flattening layers: %w", err)
	}
	log.Info("layers flattened", "layers", len(st.layers)+1, "took", time.Since(t0).Round(time.Millisecond))
	if err := finishRootfs(rootfs, final, id, hash); err != nil {
		return nil, err
	}
	size, _, err := diskUsage(rootfs)
	if err != nil {
		return nil, fmt.Errorf("measuring root filesystem: %w", err)
	}
	if err := syncFS(rootfs); err != nil {
		return nil, fmt.Errorf("syncing root filesystem: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.Rename(rootfs, filepath.Join(dir, "rootfs")); err != nil {
		return nil, fmt.Errorf("moving root filesystem into place: %w", err)
	}
	t := &Template{
		Name: spec.Name, ID: id, Hash: hash, RootFS: filepath.Join(dir, "rootfs"),
		User: final.User, Workdir: final.Workdir, Env: final.Env,
		BuiltAt: time.Now().UTC(), BuildDuration: time.Since(start).Round(time.Millisecond),
		SizeBytes: size, BuilderVersion: BuilderVersion, Spec: final,
	}
	if len(t.Env) == 0 {
		t.Env = nil
	}
	if err := writeMeta(dir, t); err != nil {
		return nil, errors.Join(fmt.Errorf("writing template metadata: %w", err), removeTree(dir))
	}
	log.Info("template built", "took", t.BuildDuration, "size_bytes", t.SizeBytes, "rootfs", t.RootFS)
	rep.finish(fmt.Sprintf("built %s in %s (%s, files shared with %s)", id,
		t.BuildDuration.Round(time.Millisecond), humanBytes(t.SizeBytes), from.ID))
	return t, nil
}

// finishRootfs makes the flattened tree a template: the default workdir
// exists, build scaffolding is gone, and the identity files are written.
func finishRootfs(rootfs string, spec Spec, id, hash string) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	own, err := resolveOwner(root.ReadFile, spec.User)
	if err != nil {
		return fmt.Errorf("default user: %w", err)
	}
	if err := mkdirOwnedIn(root, rel(spec.Workdir), own.UID, own.GID); err != nil {
		return fmt.Errorf("default workdir %s: %w", spec.Workdir, err)
	}
	if err := finalize(root, spec, id, hash); err != nil {
		return fmt.Errorf("finalizing root filesystem: %w", err)
	}
	return nil
}

// instruction runs one instruction on st, or takes its layer from the
// cache.
func (b *Builder) instruction(ctx context.Context, log *slog.Logger, rep *reporter, st *imageState, key string, step int, in Instruction) error {
	switch in.Op {
	case OpEnv:
		for i := 0; i+1 < len(in.Args); i += 2 {
			st.env[in.Args[i]] = in.Args[i+1]
		}
	case OpWorkdir:
		dir := in.Args[0]
		if !path.IsAbs(dir) {
			dir = path.Join(st.workdir, dir)
		}
		st.workdir = path.Clean(dir)
		st.finalWorkdir = st.workdir
	case OpUser:
		if _, err := resolveOwner(st.readFile, in.Args[0]); err != nil {
			return err
		}
		st.user = in.Args[0]
		if name, _, _ := strings.Cut(in.Args[0], ":"); userRE.MatchString(name) {
			st.finalUser = name
		}
	case OpRun:
		return b.runLayer(ctx, log, rep, st, key, step, in)
	case OpCopy:
		return b.copyLayer(ctx, log, rep, st, key, step, in)
	}
	st.key = key
	if st.cached {
		// Nothing before it ran: the step's result is as cached as theirs.
		log.Info("cached", "step", step)
		rep.update(Event{Phase: "cached", Percent: 100})
	} else {
		rep.update(Event{Phase: "done", Percent: 100})
	}
	return nil
}

// runLayer runs a RUN in a sandbox over st's layers (b.Steps), or takes
// its layer from the cache. step is its 1-based index in the spec's
// instructions (0 for the package install, whose apt-get output becomes
// progress).
func (b *Builder) runLayer(ctx context.Context, log *slog.Logger, rep *reporter, st *imageState, key string, step int, in Instruction) error {
	return b.cachedLayer(ctx, log, rep, st, key, step, in, func(diff, _, _ string) error {
		own, err := resolveOwner(st.readFile, cmp.Or(in.User, st.user))
		if err != nil {
			return err
		}
		out := &tail{n: 20}
		var ap aptProgress
		line := func(s string) {
			out.add(s)
			log.Info(s, "step", step)
			ev, ok := ap.line(s)
			if step != 0 || !ok {
				ev = Event{Phase: "running", Percent: -1, Item: s}
			}
			rep.update(ev)
		}
		code, err := b.runStep(ctx, st, diff, []string{"/bin/sh", "-c", in.Args[0]}, own, st.workdir, line)
		switch {
		case errors.Is(err, ErrStepTimeout):
			return &StepError{Step: step, Instruction: in, ExitCode: -1, LogTail: slices.Clone(out.lines), Err: err, Timeout: b.StepTimeout}
		case err != nil:
			return err
		}
		if code != 0 {
			return &StepError{Step: step, Instruction: in, ExitCode: code, LogTail: slices.Clone(out.lines)}
		}
		return nil
	})
}

// runStep runs args as own in dir over st's layers with b.Steps, its
// changes going to upper (the layer being made).
func (b *Builder) runStep(ctx context.Context, st *imageState, upper string, args []string, own owner, dir string, line func(string)) (int, error) {
	if b.Steps == nil {
		return 0, ErrNoStepRunner
	}
	return b.Steps.RunStep(ctx, StepSpec{
		Layers: st.lower(), Upper: upper,
		Args: args, Env: st.runEnv(own.Home), Dir: dir,
		UID: uint32(own.UID), GID: uint32(own.GID), Groups: own.Groups,
		Output: line, Timeout: b.StepTimeout,
	})
}

// stepsLayer applies a group of a spec's Steps (stepGroups), the first of
// them at index first, as one layer, or takes it from the cache: a user
// step runs the image's useradd in a sandbox, the others write files
// through an overlay on the host.
func (b *Builder) stepsLayer(ctx context.Context, log *slog.Logger, rep *reporter, st *imageState, key string, first int, group []Step) error {
	st.cached = st.cached && b.hasLayer(key)
	err := b.layer(ctx, st, key, "steps", func(diff, work, scratch string) error {
		if u := group[0].User; u != nil {
			out := &tail{n: 20}
			code, err := b.runStep(ctx, st, diff, userCommand(u), owner{Home: "/root"}, "/", func(s string) {
				out.add(s)
				log.Info(s, "step", 0)
			})
			if err == nil && code != 0 {
				err = fmt.Errorf("useradd and friends exited with code %d:\n  %s", code, strings.ReplaceAll(out.String(), "\n", "\n  "))
			}
			if err != nil {
				return fmt.Errorf("step %d (%s): %w", first+1, group[0], err)
			}
			return nil
		}
		return withOverlay(st.lower(), diff, work, filepath.Join(scratch, "mnt"), func(root *os.Root) error {
			return applyFileSteps(rep, root, first, group)
		})
	})
	if err != nil {
		return err
	}
	st.layers = append(st.layers, b.layerDiff(key))
	st.key = key
	return nil
}

// stepGroups splits steps into the groups that each make one layer: every
// user step alone (it runs in a sandbox), and the runs of other steps
// between them (applied on the host).
func stepGroups(steps []Step) [][]Step {
	var groups [][]Step
	for i, st := range steps {
		if st.User != nil || i == 0 || steps[i-1].User != nil {
			groups = append(groups, nil)
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], st)
	}
	return groups
}

// copyLayer runs a COPY on the host: the context archive is extracted into
// an overlay of st's layers through an os.Root.
func (b *Builder) copyLayer(ctx context.Context, log *slog.Logger, rep *reporter, st *imageState, key string, step int, in Instruction) error {
	archive := b.ContextArchive(in.FilesHash)
	if _, err := os.Stat(archive); err != nil {
		return fmt.Errorf("build context %s: %w", in.FilesHash, err)
	}
	return b.cachedLayer(ctx, log, rep, st, key, step, in, func(diff, work, scratch string) error {
		own := owner{}
		if in.Chown != "" {
			var err error
			if own, err = resolveOwner(st.readFile, in.Chown); err != nil {
				return err
			}
		}
		return withOverlay(st.lower(), diff, work, filepath.Join(scratch, "mnt"), func(root *os.Root) error {
			isDir := func(name string) bool {
				fi, err := root.Stat(name)
				return err == nil && fi.IsDir()
			}
			c, err := newCopySpec(in, st.workdir, isDir, own)
			if err != nil {
				return err
			}
			n, err := extractCopy(archive, root, c)
			if err == nil {
				log.Info(fmt.Sprintf("copied %d files and directories to %s", n, c.dest), "step", step)
			}
			return err
		})
	})
}

// cachedLayer takes the layer key from the cache, or makes it with fn,
// and puts it on top of st.
func (b *Builder) cachedLayer(ctx context.Context, log *slog.Logger, rep *reporter, st *imageState, key string, step int, in Instruction, fn func(diff, work, scratch string) error) error {
	if b.hasLayer(key) {
		log.Info("cached", "step", step)
		rep.update(Event{Phase: "cached", Percent: 100})
	} else {
		st.cached = false
		rep.update(Event{Phase: "running", Percent: -1})
		if err := b.layer(ctx, st, key, in.String(), fn); err != nil {
			return err
		}
		rep.update(Event{Phase: "done", Percent: 100})
	}
	st.layers = append(st.layers, b.layerDiff(key))
	st.key = key
	return nil
}

// layer makes the layer key with fn unless it exists (another build may
// have made it while we waited for its lock). fn gets an empty upper
// directory, a work directory and a scratch directory; only what fn leaves
// in diff is kept, and only if it succeeds.
func (b *Builder) layer(ctx context.Context, st *imageState, key, what string, fn func(diff, work, scratch string) error) (err error) {
	if b.hasLayer(key) {
		return nil
	}
	unlock, err := lockFile(ctx, filepath.Join(b.layersDir(), key+".lock"))
	if err != nil {
		return fmt.Errorf("locking layer: %w", err)
	}
	defer unlock()
	if b.hasLayer(key) {
		return nil
	}
	tmpRoot := filepath.Join(b.layersDir(), ".tmp")
	if err := os.MkdirAll(tmpRoot, 0o700); err != nil {
		return err
	}
	if err := removeLeftovers(b.logger(), tmpRoot, key[:16]+"-", filepath.Join(b.layersDir(), key)); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(tmpRoot, key[:16]+"-")
	if err != nil {
		return err
	}
	if tmp, err = filepath.EvalSymlinks(tmp); err != nil {
		return err
	}
	defer func() {
		if cerr := errors.Join(sweepMounts(tmp), removeTree(tmp)); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	diff, work, scratch := filepath.Join(tmp, "diff"), filepath.Join(tmp, "work"), filepath.Join(tmp, "scratch")
	for _, d := range []string{diff, work, scratch} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	t0 := time.Now()
	if err := fn(diff, work, scratch); err != nil {
		return err
	}
	if err := errors.Join(sweepMounts(tmp), removeTree(work), removeTree(scratch)); err != nil {
		return err
	}
	meta := layerMeta{Key: key, Parent: st.key, Step: what, Created: time.Now().UTC(), Took: time.Since(t0)}
	data, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, layerMetaFile), append(data, '\n'), 0o644); err != nil {
		return err
	}
	if err := syncFS(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(b.layersDir(), key)); err != nil {
		return fmt.Errorf("moving layer into place: %w", err)
	}
	return nil
}

// overlayOpts are the mount options of a build overlay. Redirects and
// metacopy would leave a layer that is not a plain directory of changes
// (a renamed directory as a pointer, a chowned file without its data), so
// they are off whatever the kernel's defaults.
func overlayOpts(lower []string, upper, work string) (string, error) {
	for _, p := range append([]string{upper, work}, lower...) {
		if strings.ContainsAny(p, ",:\\") {
			return "", fmt.Errorf("path %q cannot be an overlay option", p)
		}
	}
	opts := "lowerdir=" + strings.Join(lower, ":") + ",upperdir=" + upper + ",workdir=" + work +
		",index=off,redirect_dir=off,metacopy=off"
	if len(opts) >= 4000 { // the kernel takes one page of options
		return "", fmt.Errorf("too many layers (%d) for one overlay mount", len(lower))
	}
	return opts, nil
}

// withOverlay mounts an overlay of lower (top first) with upper and work
// at mnt on the host, calls fn with the merged tree, and unmounts it. The
// tree is only written through fn's os.Root; nothing in it runs.
func withOverlay(lower []string, upper, work, mnt string, fn func(root *os.Root) error) (err error) {
	opts, err := overlayOpts(lower, upper, work)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return err
	}
	if err := unix.Mount("overlay", mnt, "overlay", unix.MS_NODEV|unix.MS_NOSUID, opts); err != nil {
		return fmt.Errorf("mounting build overlay: %w", err)
	}
	defer func() { err = errors.Join(err, unmount(mnt)) }()
	root, err := os.OpenRoot(mnt)
	if err != nil {
		return err
	}
	defer root.Close()
	return fn(root)
}

// aptInstallCommand is the RUN that installs a derived spec's Packages.
func aptInstallCommand(pkgs []string) string {
	sorted := slices.Compact(slices.Sorted(slices.Values(pkgs)))
	return "export DEBIAN_FRONTEND=noninteractive DEBCONF_NONINTERACTIVE_SEEN=true && apt-get -q update && " +
		"apt-get -q -y --no-install-recommends -o Dpkg::Use-Pty=0 " +
		"-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold install " + strings.Join(sorted, " ") +
		" && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb"
}
