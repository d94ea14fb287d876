package template

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail/jailtest"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

// recorder is a slog handler that keeps the build log's records.
type recorder struct {
	mu   sync.Mutex
	recs []logRecord
}

type logRecord struct {
	msg  string
	step int64
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recorder) WithGroup(string) slog.Handler            { return r }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	lr := logRecord{msg: rec.Message, step: -1}
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "step" && a.Value.Kind() == slog.KindInt64 {
			lr.step = a.Value.Int64()
		}
		return true
	})
	r.mu.Lock()
	r.recs = append(r.recs, lr)
	r.mu.Unlock()
	return nil
}

// steps returns the steps logged as taken from the cache, and those
// logged without "cached" (run).
func (r *recorder) steps() (cached, ran []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	started := map[int64]bool{}
	hit := map[int64]bool{}
	for _, rec := range r.recs {
		if rec.step <= 0 {
			continue
		}
		started[rec.step] = true
		if rec.msg == "cached" {
			hit[rec.step] = true
		}
	}
	for s := range started {
		if hit[s] {
			cached = append(cached, int(s))
		} else {
			ran = append(ran, int(s))
		}
	}
	slices.Sort(cached)
	slices.Sort(ran)
	return cached, ran
}

// tinyBase builds, in data, a template from a few host binaries (jailtest's
// root filesystem) in place of debootstrap: a From for builds that takes
// seconds.
func tinyBase(t *testing.T, data string) *Template {
	t.Helper()
	testenv.RequireRoot(t)
	b := testBuilder(t, data)
	b.bootstrap = func(_ context.Context, rootfs string, _ Spec) error { return jailtest.BuildRootfs(rootfs) }
	tmpl, err := b.Ensure(t.Context(), Spec{
		Name: "tiny", Suite: "bookworm", Variant: "minbase",
		User: DefaultUser, Workdir: DefaultWorkdir, Env: map[string]string{"LANG": "C.UTF-8"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// writeContext stores a context archive with files (name: content) in b's
// data dir and returns its hash, as the Dockerfile front end or the E2B
// API would.
func writeContext(t *testing.T, b *Builder, files map[string]string) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if strings.HasSuffix(name, "/") {
			tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755})
			continue
		}
		tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(files[name]))})
		tw.Write([]byte(files[name]))
	}
	tw.Close()
	sum := sha256.Sum256(buf.Bytes())
	h := hex.EncodeToString(sum[:])
	if err := os.MkdirAll(filepath.Dir(b.ContextArchive(h)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b.ContextArchive(h), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return h
}

func derivedSpec(filesHash, last string) Spec {
	return Spec{
		Name: "test-derived", From: "tiny",
		Instructions: []Instruction{
			{Op: OpRun, Args: []string{"rm /etc/hosts && echo one > /one"}},
			{Op: OpCopy, Args: []string{"src", "/dst/"}, FilesHash: filesHash, Chown: "user"},
			{Op: OpEnv, Args: []string{"X", "1"}},
			{Op: OpUser, Args: []string{"user"}},
			{Op: OpWorkdir, Args: []string{"/home/user/work"}},
			{Op: OpRun, Args: []string{last}},
		},
	}
}

func buildLogged(t *testing.T, data string, spec Spec) (*Template, *recorder, time.Duration, error) {
	t.Helper()
	rec := &recorder{}
	b := testBuilder(t, data)
	b.Log = slog.New(rec)
	start := time.Now()
	tmpl, err := b.Ensure(t.Context(), spec)
	return tmpl, rec, time.Since(start), err
}

func TestDerivedBuildAndCache(t *testing.T) {
	data := safeTempDir(t)
	tinyBase(t, data)
	b := testBuilder(t, data)
	files := writeContext(t, b, map[string]string{"src/": "", "src/a.txt": "A\n", "src/sub/": "", "src/sub/b.txt": "B\n", "other.txt": "no\n"})
	spec := derivedSpec(files, `echo "$X $(id -u) $(pwd)" > two && echo built`)

	tmpl, rec, took, err := buildLogged(t, data, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first build: %s", took)
	if cached, ran := rec.steps(); len(cached) != 0 || !slices.Equal(ran, []int{1, 2, 3, 4, 5, 6}) {
		t.Errorf("first build: cached %v, ran %v; want nothing cached", cached, ran)
	}
	root := tmpl.RootFS
	checkFile(t, root, "one", 0o644, 0, "one\n")
	checkFile(t, root, "dst/a.txt", 0o644, 1000, "A\n")
	checkFile(t, root, "dst/sub/b.txt", 0o644, 1000, "B\n")
	checkFile(t, root, "home/user/work/two", 0o644, 1000, "1 1000 /home/user/work\n")
	if _, err := os.Lstat(filepath.Join(root, "etc/hosts")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("/etc/hosts deleted by a RUN is in the template: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "dst/other.txt")); err == nil {
		t.Error("COPY copied a file its source does not name")
	}
	if tmpl.User != "user" || tmpl.Workdir != "/home/user/work" || tmpl.Env["X"] != "1" || tmpl.Env["LANG"] != "C.UTF-8" {
		t.Errorf("template defaults: user %q workdir %q env %v", tmpl.User, tmpl.Workdir, tmpl.Env)
	}
	assertNoMounts(t, data)

	// Nothing changed: the template is found whole, every step cached.
	again, rec, took, err := buildLogged(t, data, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rebuild with no change: %s", took)
	if again.ID != tmpl.ID || !again.BuiltAt.Equal(tmpl.BuiltAt) {
		t.Errorf("rebuild made %s, want the cached %s", again.ID, tmpl.ID)
	}
	if cached, ran := rec.steps(); len(ran) != 0 || len(cached) != 6 {
		t.Errorf("rebuild: cached %v, ran %v; want all 6 cached", cached, ran)
	}

	// The last step changed: it alone runs.
	changed := derivedSpec(files, "echo changed > two")
	tmpl2, rec, took, err := buildLogged(t, data, changed)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rebuild with the last step changed: %s", took)
	if cached, ran := rec.steps(); !slices.Equal(cached, []int{1, 2, 3, 4, 5}) || !slices.Equal(ran, []int{6}) {
		t.Errorf("changed last step: cached %v, ran %v; want 1-5 cached", cached, ran)
	}
	checkFile(t, tmpl2.RootFS, "home/user/work/two", 0o644, 1000, "changed\n")
	checkFile(t, tmpl2.RootFS, "one", 0o644, 0, "one\n")

	// A changed file in the context reruns the COPY and what follows.
	files2 := writeContext(t, b, map[string]string{"src/": "", "src/a.txt": "A2\n", "src/sub/": "", "src/sub/b.txt": "B\n"})
	tmpl3, rec, _, err := buildLogged(t, data, derivedSpec(files2, "echo changed > two"))
	if err != nil {
		t.Fatal(err)
	}
	if cached, ran := rec.steps(); !slices.Equal(cached, []int{1}) || !slices.Equal(ran, []int{2, 3, 4, 5, 6}) {
		t.Errorf("changed COPY: cached %v, ran %v; want 1 cached", cached, ran)
	}
	checkFile(t, tmpl3.RootFS, "dst/a.txt", 0o644, 1000, "A2\n")

	// Force reruns from the forced step, even though it is cached.
	forced := derivedSpec(files2, "echo changed > two")
	forced.Instructions[1].Force = true
	if _, rec, _, err = buildLogged(t, data, forced); err != nil {
		t.Fatal(err)
	}
	if cached, ran := rec.steps(); !slices.Equal(cached, []int{1}) || !slices.Equal(ran, []int{2, 3, 4, 5, 6}) {
		t.Errorf("forced COPY: cached %v, ran %v; want 1 cached", cached, ran)
	}
	assertNoMounts(t, data)
	assertNoBuildDirs(t, data, "")
}

func TestDerivedStepFailure(t *testing.T) {
	data := safeTempDir(t)
	tinyBase(t, data)
	spec := Spec{
		Name: "test-fail", From: "tiny",
		Instructions: []Instruction{
			{Op: OpRun, Args: []string{"echo fine > /fine"}},
			{Op: OpRun, Args: []string{"for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25; do echo line $i; done; echo oops >&2; exit 3"}},
			{Op: OpRun, Args: []string{"echo never"}},
		},
	}
	_, rec, _, err := buildLogged(t, data, spec)
	var se *StepError
	if !errors.As(err, &se) {
		t.Fatalf("Ensure = %v, want a StepError", err)
	}
	t.Logf("error: %v", err)
	if se.Step != 2 || se.ExitCode != 3 || se.Instruction.Op != OpRun {
		t.Errorf("StepError step %d exit %d %s; want step 2, exit 3", se.Step, se.ExitCode, se.Instruction)
	}
	if n := len(se.LogTail); n == 0 || n > 20 || se.LogTail[n-1] != "oops" || !strings.Contains(se.LogTail[n-2], "line 25") {
		t.Errorf("log tail = %q, want the last lines ending in oops", se.LogTail)
	}
	for _, want := range []string{"step 2", "exit code 3", "oops"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, ran := rec.steps(); !slices.Equal(ran, []int{1, 2}) {
		t.Errorf("steps run: %v, want 1 and 2 (not 3)", ran)
	}
	b := testBuilder(t, data)
	if _, err := b.Lookup("test-fail"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup of the failed template = %v, want ErrNotFound", err)
	}
	assertNoMounts(t, data)
	assertNoBuildDirs(t, data, "")
	if entries, _ := os.ReadDir(filepath.Join(data, "templates", ".layers", ".tmp")); len(entries) != 0 {
		t.Errorf("unfinished layers left: %v", entries)
	}
	if _, err := os.Stat(filepath.Join(data, "templates", "test-fail")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the failed template's directory (its lock) is left: %v", err)
	}

	// The step before the failure was kept: fixing the failing step reruns
	// only it.
	spec.Instructions[1].Args = []string{"true"}
	if _, rec, _, err = buildLogged(t, data, spec); err != nil {
		t.Fatal(err)
	}
	if cached, ran := rec.steps(); !slices.Equal(cached, []int{1}) || !slices.Equal(ran, []int{2, 3}) {
		t.Errorf("after the fix: cached %v, ran %v", cached, ran)
	}
}

func TestDerivedCancel(t *testing.T) {
	data := safeTempDir(t)
	tinyBase(t, data)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	b := testBuilder(t, data)
	start := time.Now()
	_, err := b.Ensure(ctx, Spec{Name: "test-cancel", From: "tiny",
		Instructions: []Instruction{{Op: OpRun, Args: []string{"sleep 60 & sleep 60"}}}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Ensure = %v, want the deadline", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("cancelled build returned after %s", d)
	}
	assertNoMounts(t, data)
	assertNoBuildDirs(t, data, "")
}

// A derived spec's Steps are a layer like any other: in the template, and
// under the instructions that follow them (as the desktop template's
// /opt/noVNC symlink is).
func TestDerivedSteps(t *testing.T) {
	data := safeTempDir(t)
	tinyBase(t, data)
	spec := Spec{
		Name: "test-steps", From: "tiny",
		Steps: []Step{
			{File: &FileStep{Path: "/opt/real/f", Content: "step\n", Mode: 0o644}},
			{Symlink: &SymlinkStep{Path: "/opt/link", Target: "/opt/real"}},
		},
		Instructions: []Instruction{{Op: OpRun, Args: []string{"cat /opt/link/f > /seen"}}},
	}
	tmpl, _, _, err := buildLogged(t, data, spec)
	if err != nil {
		t.Fatal(err)
	}
	checkFile(t, tmpl.RootFS, "opt/real/f", 0o644, 0, "step\n")
	checkFile(t, tmpl.RootFS, "seen", 0o644, 0, "step\n")
	if target, err := os.Readlink(filepath.Join(tmpl.RootFS, "opt/link")); err != nil || target != "/opt/real" {
		t.Errorf("/opt/link = %q, %v; want a symlink to /opt/real", target, err)
	}
	assertNoMounts(t, data)
}

// A step that runs past the builder's step timeout fails the build with an
// error that names it and the timeout.
func TestDerivedStepTimeout(t *testing.T) {
	data := safeTempDir(t)
	tinyBase(t, data)
	b := testBuilder(t, data)
	b.StepTimeout = time.Second
	start := time.Now()
	_, err := b.Ensure(t.Context(), Spec{Name: "test-timeout", From: "tiny", Instructions: []Instruction{
		{Op: OpRun, Args: []string{"echo fine"}},
		{Op: OpRun, Args: []string{"echo started; sleep 60"}},
	}})
	var se *StepError
	if !errors.As(err, &se) || !errors.Is(err, ErrStepTimeout) || !strings.Contains(err.Error(), "step 2 (RUN echo started; sleep 60) timed out after 1s") {
		t.Fatalf("Ensure = %v, want step 2 timed out after 1s", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the timed-out build returned after %s", d)
	}
	if !slices.Contains(se.LogTail, "started") {
		t.Errorf("log tail %q lacks the step's output", se.LogTail)
	}
	assertNoMounts(t, data)
	assertNoBuildDirs(t, data, "")
}

func TestStepGroups(t *testing.T) {
	u := Step{User: &UserStep{Name: "u"}}
	f := Step{File: &FileStep{Path: "/f"}}
	d := Step{Dir: &DirStep{Path: "/d"}}
	got := stepGroups([]Step{u, d, f, u, u, f})
	want := [][]Step{{u}, {d, f}, {u}, {u}, {f}}
	if len(got) != len(want) {
		t.Fatalf("stepGroups = %d groups, want %d", len(got), len(want))
	}
	for i := range want {
		if len(got[i]) != len(want[i]) || got[i][0].String() != want[i][0].String() {
			t.Errorf("group %d = %v, want %v", i, got[i], want[i])
		}
	}
	if g := stepGroups(nil); len(g) != 0 {
		t.Errorf("stepGroups(nil) = %v", g)
	}
}
