package template

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DefaultMirror is the Debian mirror used when [Builder.Mirror] is empty. It
// is also the mirror written to a template's /etc/apt/sources.list, whatever
// mirror built it.
const DefaultMirror = "http://deb.debian.org/debian"

// ErrNotFound is returned by Lookup and Remove for an unknown template.
var ErrNotFound = errors.New("template not found")

// Template is a built template in the cache.
type Template struct {
	Name string `json:"name"`
	// ID is the name and the first 12 hex digits of Hash.
	ID   string `json:"id"`
	Hash string `json:"hash"`
	// RootFS is the absolute path of the root filesystem directory. Treat it
	// as read-only: sandboxes mount it as the lower layer of an overlay.
	RootFS string `json:"-"`

	User    string            `json:"user"`
	Workdir string            `json:"workdir"`
	Env     map[string]string `json:"env,omitempty"`

	BuiltAt        time.Time     `json:"built_at"`
	BuildDuration  time.Duration `json:"build_duration"`
	SizeBytes      int64         `json:"size_bytes"`
	BuilderVersion int           `json:"builder_version"`
	Spec           Spec          `json:"spec"`
}

const metaFile = "template.json"

// Builder builds templates and manages the template cache under DataDir.
// The zero value is not usable: DataDir must be set. A Builder may be used
// from several goroutines and several processes at once.
type Builder struct {
	// DataDir holds the cache in DataDir/templates.
	DataDir string
	// Mirror is the Debian mirror debootstrap and apt download from;
	// empty means DefaultMirror.
	Mirror string
	// Log receives build stages and command output (at debug level);
	// nil discards.
	Log *slog.Logger
	// Progress, when not nil, receives a progress display: one redrawn
	// line with a bar on a terminal, plain lines per phase otherwise.
	Progress io.Writer
	// RegistryTransport carries the registry pulls of FromImage builds;
	// nil is http.DefaultTransport (the CLI, run by the operator). The
	// server, pulling what API callers name, sets a fetch.Dialer's.
	RegistryTransport http.RoundTripper

	// Steps runs the build steps that run commands (RUN, Packages, user
	// steps), each in a sandbox; nil fails a build that has one
	// (ErrNoStepRunner).
	Steps StepRunner
	// StepTimeout bounds each step run by Steps; zero: no bound.
	StepTimeout time.Duration
	// BuildTimeout bounds the build of one template (not the template it
	// starts from, which is a build of its own); zero: no bound.
	BuildTimeout time.Duration
	// ReadyTimeout bounds how long a build waits for its template's ready
	// command (Spec.ReadyCmd) to succeed; zero: DefaultReadyTimeout.
	ReadyTimeout time.Duration

	// OnProgress, when set, sees every progress event of a build: the
	// stage and what it is doing (the server shows it to the creates of
	// a built-in template it builds on demand).
	OnProgress func(stage string, ev Event)

	// Test seam: bootstrap replaces the debootstrap stage.
	bootstrap func(ctx context.Context, rootfs string, spec Spec) error
}

func (b *Builder) logger() *slog.Logger {
	if b.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return b.Log
}

func (b *Builder) mirror() string {
	if b.Mirror == "" {
		return DefaultMirror
	}
	return b.Mirror
}

func (b *Builder) templatesDir() string {
	dir, err := filepath.Abs(filepath.Join(b.DataDir, "templates"))
	if err != nil { // no working directory: keep it relative
		return filepath.Join(b.DataDir, "templates")
	}
	return dir
}

func (b *Builder) versionDir(name, hash string) string {
	return filepath.Join(b.templatesDir(), name, hash)
}

// Ensure returns the template for spec, building it first if it is not in
// the cache. Concurrent calls for the same spec, in this process or another,
// build it once; the others wait for it (or for ctx). A failed or cancelled
// build leaves no mounts and no files behind.
func (b *Builder) Ensure(ctx context.Context, spec Spec) (*Template, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if b.DataDir == "" {
		return nil, errors.New("template builder: no data directory")
	}
	hash := spec.Hash()
	var from *Template
	nonce := ""
	if spec.From != "" || spec.FromImage != "" {
		f, err := b.resolveBase(ctx, spec)
		if err != nil {
			return nil, fmt.Errorf("template %s: from %s: %w", spec.Name, cmp.Or(spec.From, spec.FromImage), err)
		}
		from, hash = f, derivedHash(spec, f.Hash)
		if slices.ContainsFunc(spec.Instructions, func(in Instruction) bool { return in.Force }) {
			// A forced step runs again, so the build is new: its own
			// version, and new keys from the forced step on.
			nonce = strconv.FormatInt(time.Now().UnixNano(), 36)
			hash = hashStrings(hash, "forced", nonce)
		}
	}
	dir := b.versionDir(spec.Name, hash)
	if t, err := readTemplate(dir); err == nil {
		b.reportCached(spec, t)
		return t, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	id := ID(spec.Name, hash)
	if err := preflight(from == nil); err != nil {
		return nil, fmt.Errorf("building template %s: %w", id, err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, fmt.Errorf("building template %s: %w", id, err)
	}
	unlock, err := lockFile(ctx, dir+".lock")
	if err != nil {
		return nil, fmt.Errorf("building template %s: locking: %w", id, err)
	}
	defer unlock()
	// Another caller may have built it while we waited for the lock.
	if t, err := readTemplate(dir); err == nil {
		b.reportCached(spec, t)
		return t, nil
	}
	t, err := b.build(ctx, spec, from, hash, dir, nonce)
	if err != nil {
		removeLockAndName(dir) // a failed build leaves no version behind, nor its lock
		return nil, fmt.Errorf("building template %s: %w", id, err)
	}
	return t, nil
}

// resolveBase returns the template a derived spec starts from: its From
// template, or its FromImage unpacked into the image cache.
func (b *Builder) resolveBase(ctx context.Context, spec Spec) (*Template, error) {
	if spec.FromImage != "" {
		return b.imageBase(ctx, spec.FromImage, spec.RegistryAuth)
	}
	return b.resolveFrom(ctx, spec.From)
}

// resolveFrom returns the template a spec starts from: a built-in one is
// built on demand; any other must exist (by name or ID).
func (b *Builder) resolveFrom(ctx context.Context, ref string) (*Template, error) {
	if s, ok := BuiltIn()[ref]; ok {
		return b.Ensure(ctx, s)
	}
	return b.Lookup(ref)
}

// CheckFrom tells, without building anything, whether the template a
// derived spec starts from (From) can be had: a built-in one, built on
// demand, or one that exists. It is the error Ensure would return for it.
func (b *Builder) CheckFrom(spec Spec) error {
	if spec.From == "" {
		return nil
	}
	if _, ok := BuiltIn()[spec.From]; ok {
		return nil
	}
	if _, err := b.Lookup(spec.From); err != nil {
		return fmt.Errorf("template %s: from %s: %w", spec.Name, spec.From, err)
	}
	return nil
}

// reportCached says that a template with instructions was found whole in
// the cache: every step cached, as a rebuild that changed nothing expects
// to hear.
func (b *Builder) reportCached(spec Spec, t *Template) {
	if len(spec.Instructions) == 0 {
		return
	}
	log := b.logger().With("template", t.ID)
	rep := newReporter(b.Progress, spec.Name, len(spec.Instructions), b.OnProgress)
	for i, in := range spec.Instructions {
		log.Info(in.String(), "step", i+1)
		log.Info("cached", "step", i+1)
		rep.startStage(shorten(in.String(), 60))
		rep.update(Event{Phase: "cached", Percent: 100})
	}
	rep.finish(fmt.Sprintf("%s is up to date: all %d steps cached", t.ID, len(spec.Instructions)))
}

// readTemplate loads a completed template from its version directory. A
// directory without metadata is an unfinished build: fs.ErrNotExist.
func readTemplate(dir string) (*Template, error) {
	data, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		return nil, err
	}
	var t Template
	if err := json.Unmarshal(data, &t); err != nil {
		return nil, fmt.Errorf("reading template metadata %s: %w", dir, err)
	}
	t.RootFS = filepath.Join(dir, "rootfs")
	if fi, err := os.Stat(t.RootFS); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("template %s: root filesystem %s missing: %w", t.ID, t.RootFS, fs.ErrNotExist)
	}
	return &t, nil
}

// writeMeta writes dir/template.json atomically and durably; it is the
// completion marker, so it is the last thing a build writes.
func writeMeta(dir string, t *Template) error {
	data, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, metaFile+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(append(data, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, metaFile))
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// List returns the completed templates in the cache, by name and then
// newest first. Unfinished builds are not listed.
func (b *Builder) List() ([]Template, error) {
	names, err := os.ReadDir(b.templatesDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("listing templates: %w", err)
	}
	var out []Template
	for _, n := range names {
		if !n.IsDir() || strings.HasPrefix(n.Name(), ".") {
			continue
		}
		versions, err := os.ReadDir(filepath.Join(b.templatesDir(), n.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted since the first read: the list is not "not found"
		} else if err != nil {
			return nil, fmt.Errorf("listing templates: %w", err)
		}
		for _, v := range versions {
			if !v.IsDir() {
				continue
			}
			t, err := readTemplate(filepath.Join(b.templatesDir(), n.Name(), v.Name()))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			} else if err != nil {
				return nil, fmt.Errorf("listing templates: %w", err)
			}
			out = append(out, *t)
		}
	}
	slices.SortFunc(out, func(a, b Template) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), b.BuiltAt.Compare(a.BuiltAt))
	})
	return out, nil
}

// Lookup returns the template with ID ref, or the newest template named ref.
func (b *Builder) Lookup(ref string) (*Template, error) {
	ts, err := b.matching(ref)
	if err != nil {
		return nil, err
	}
	return &ts[0], nil
}

// matching returns the templates ref names: one by ID, or every version of a
// name (newest first).
func (b *Builder) matching(ref string) ([]Template, error) {
	all, err := b.List()
	if err != nil {
		return nil, err
	}
	var byName []Template
	for _, t := range all {
		if t.ID == ref {
			return []Template{t}, nil
		}
		if t.Name == ref {
			byName = append(byName, t)
		}
	}
	if len(byName) == 0 {
		return nil, fmt.Errorf("template %q: %w", ref, ErrNotFound)
	}
	return byName, nil
}

// Remove deletes the template with ID ref, or every version of the template
// named ref, and returns what it removed. The caller must make sure no
// sandbox still uses them. Each version is locked while it is removed, so a
// concurrent Ensure either finds it whole or rebuilds it.
func (b *Builder) Remove(ctx context.Context, ref string) ([]Template, error) {
	ts, err := b.matching(ref)
	if err != nil {
		return nil, err
	}
	var removed []Template
	for _, t := range ts {
		if err := b.removeVersion(ctx, t); err != nil {
			return removed, fmt.Errorf("removing template %s: %w", t.ID, err)
		}
		removed = append(removed, t)
	}
	return removed, nil
}

func (b *Builder) removeVersion(ctx context.Context, t Template) error {
	dir := b.versionDir(t.Name, t.Hash)
	unlock, err := lockFile(ctx, dir+".lock")
	if err != nil {
		return fmt.Errorf("locking: %w", err)
	}
	defer unlock()
	// Take the marker away first, so a crash part-way leaves an unfinished
	// build (ignored, then cleaned) rather than a broken template.
	if err := os.Remove(filepath.Join(dir, metaFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := syncDir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := removeTree(dir); err != nil {
		return err
	}
	removeLockAndName(dir)
	return nil
}

// removeLockAndName removes the lock of version dir, which the caller
// holds (lockFile notices a removed lock), and the template's name
// directory when that leaves it empty.
func removeLockAndName(dir string) {
	os.Remove(dir + ".lock")
	os.Remove(filepath.Dir(dir))
}

// ErrNoDebootstrap is returned when a template must be built and
// debootstrap is not installed.
var ErrNoDebootstrap = errors.New("debootstrap is not installed; install it with: apt-get install debootstrap")
