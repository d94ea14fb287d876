package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/egress"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail/jailtest"
	"github.com/agent-sandbox/agent-sandbox/internal/mountinfo"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox/sandboxtest"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

// TestMain lets the test binary serve as the jail's init, which the
// sandboxes of template build's RUN steps re-execute (as the agent-sandbox
// binary does in serve).
func TestMain(m *testing.M) {
	jail.ExitIfInit()
	os.Exit(m.Run())
}

// buildDataDir is a data directory for builds: it is removed only when
// nothing is mounted below it, where os.RemoveAll would descend into a
// bind-mounted /dev a failed build left behind.
func buildDataDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cli-template-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ms := mountsBelow(t, dir); len(ms) > 0 {
			t.Errorf("left mounted, so %s is not removed: %v", dir, ms)
			return
		}
		os.RemoveAll(dir)
	})
	return dir
}

// mountsBelow lists the mounts strictly below dir.
func mountsBelow(t *testing.T, dir string) []string {
	t.Helper()
	ms, err := mountinfo.Under(dir)
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(ms, func(m string) bool { return m == filepath.Clean(dir) })
}

// stepLineRE matches a plain progress line of one build step, e.g.
// "template web [3/7] RUN make: cached".
var stepLineRE = regexp.MustCompile(`^template \S+ \[(\d+)/\d+\] .*: (cached|running|done)$`)

// stepsRun returns the steps (1-based) that the progress in stderr shows
// as run, and those it shows as cached. The last stage, "finish", is a
// step of no instruction: it is left out with n, the instruction count.
func stepsRun(stderr string, n int) (ran, cached []int) {
	seen := map[int]string{}
	for line := range strings.Lines(stderr) {
		m := stepLineRE.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		step, _ := strconv.Atoi(m[1])
		if step <= n && seen[step] != "cached" {
			seen[step] = m[2]
		}
	}
	for step, phase := range seen {
		if phase == "cached" {
			cached = append(cached, step)
		} else {
			ran = append(ran, step)
		}
	}
	slices.Sort(ran)
	slices.Sort(cached)
	return ran, cached
}

func seq(from, to int) []int {
	var s []int
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

const testDockerfile = `# A template from the small test template.
FROM tiny
ARG GREETING=hello
COPY files/ /opt/app/
ENV GREETING="${GREETING} world" APP=/opt/app
RUN echo "$GREETING" > /greeting && cat $APP/a.txt $APP/sub/b.txt > /copied
RUN id -u > /uid-at-build
USER user
WORKDIR /home/user/work
RUN pwd > here && echo "$APP" >> here
CMD ["sleep", "infinity"]
`

// TestTemplateBuildFromDockerfile builds a template with template build
// from a Dockerfile on the small test template, rebuilds it unchanged and
// with one step changed, and makes a step fail.
func TestTemplateBuildFromDockerfile(t *testing.T) {
	testenv.RequireRoot(t)
	data, ctxDir := buildDataDir(t), t.TempDir()
	putTemplate(t, data, "tiny", time.Now(), func(rootfs string) error {
		if err := jailtest.BuildRootfs(rootfs); err != nil {
			return fmt.Errorf("making the test template's root filesystem: %w", err)
		}
		return nil
	})
	writeTree(t, ctxDir, map[string]string{
		"Dockerfile": testDockerfile, "files/a.txt": "A\n", "files/sub/b.txt": "B\n", "other.txt": "not copied\n",
	})
	const steps = 7 // instructions in testDockerfile (ARG and CMD are none)
	// What the command does once it has the server's step runner (which
	// takes the host lock on sandbox networking that this test holds).
	runner := sandboxtest.StepRunner(t, egress.Ceiling{})
	buildReq := func(t *testing.T, req buildRequest) result {
		t.Helper()
		var stdout, stderr bytes.Buffer
		b := &template.Builder{DataDir: data, Steps: runner, Progress: &stderr}
		req.file = filepath.Join(ctxDir, "Dockerfile")
		build, err := prepareBuild(b, req)
		if err == nil {
			err = build.run(t.Context(), b, streams{stdout: &stdout, stderr: &stderr})
		}
		return result{stdout.String(), stderr.String(), err}
	}
	build := func(t *testing.T, noCache bool, name string) result {
		t.Helper()
		return buildReq(t, buildRequest{name: name, noCache: noCache})
	}
	b := &template.Builder{DataDir: data}

	res := build(t, false, "web")
	if res.err != nil {
		t.Fatalf("build: %v\n%s", res.err, res.stderr)
	}
	t.Logf("first build:\n%s%s", res.stderr, res.stdout)
	if ran, cached := stepsRun(res.stderr, steps); !slices.Equal(ran, seq(1, steps)) || len(cached) != 0 {
		t.Errorf("first build ran steps %v and took %v from the cache; want all run", ran, cached)
	}
	first, err := b.Lookup("web")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Template:    " + first.ID + "\n", "Build time:  ", "Size:        "} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, res.stdout)
		}
	}
	root := first.RootFS
	for name, want := range map[string]string{
		"greeting": "hello world\n", "copied": "A\nB\n", "uid-at-build": "0\n",
		"opt/app/a.txt": "A\n", "opt/app/sub/b.txt": "B\n", "home/user/work/here": "/home/user/work\n/opt/app\n",
	} {
		if got, err := os.ReadFile(filepath.Join(root, name)); err != nil || string(got) != want {
			t.Errorf("/%s = %q, %v; want %q", name, got, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "opt/app/other.txt")); err == nil {
		t.Error("a file COPY does not name is in the template")
	}
	if first.User != "user" || first.Workdir != "/home/user/work" || first.Env["GREETING"] != "hello world" ||
		first.Env["APP"] != "/opt/app" || first.Spec.StartCmd != "sleep infinity" {
		t.Errorf("template defaults: user %q, workdir %q, env %v, start %q", first.User, first.Workdir, first.Env, first.Spec.StartCmd)
	}
	if _, ok := first.Env["ARG"]; ok {
		t.Error("an ARG is in the template's environment")
	}

	// No change: quick, every step cached, the same template.
	start := time.Now()
	res = build(t, false, "web")
	took := time.Since(start)
	if res.err != nil {
		t.Fatal(res.err)
	}
	t.Logf("rebuild with no change took %s:\n%s%s", took, res.stderr, res.stdout)
	if took > 2*time.Second {
		t.Errorf("a rebuild with no change took %s, want < 2s", took)
	}
	if ran, cached := stepsRun(res.stderr, steps); len(ran) != 0 || !slices.Equal(cached, seq(1, steps)) {
		t.Errorf("rebuild ran steps %v and took %v from the cache; want all cached", ran, cached)
	}
	if want := fmt.Sprintf("%s is up to date: all %d steps cached", first.ID, steps); !strings.Contains(res.stderr, want) {
		t.Errorf("rebuild does not say %q", want)
	}
	if !strings.Contains(res.stdout, "Template:    "+first.ID+"\n") || !strings.Contains(res.stdout, "up to date") {
		t.Errorf("rebuild output:\n%s", res.stdout)
	}

	// Resources and a recording are the template's own: a new version,
	// every step cached.
	res = buildReq(t, buildRequest{name: "web", resources: template.Spec{
		CPUCount: 1, MemoryMB: 768, DiskIO: template.DiskIO{WriteMiBps: 20, ReadIOPS: 100}, Recording: "mp4",
	}})
	if res.err != nil {
		t.Fatal(res.err)
	}
	sized, err := b.Lookup("web")
	if err != nil {
		t.Fatal(err)
	}
	if got := sized.Spec; sized.ID == first.ID || got.CPUCount != 1 || got.MemoryMB != 768 ||
		got.DiskIO != (template.DiskIO{WriteMiBps: 20, ReadIOPS: 100}) || got.Recording != "mp4" {
		t.Errorf("with resource flags: %s, cpu %d, memory %d, disk I/O %+v, recording %q", sized.ID, got.CPUCount, got.MemoryMB, got.DiskIO, got.Recording)
	}
	if ran, _ := stepsRun(res.stderr, steps); len(ran) != 0 {
		t.Errorf("a resources-only change ran steps %v", ran)
	}
	if res = runCLI(t, "", "template", "rm", "--data-dir", data, sized.ID); res.err != nil {
		t.Fatal(res.err)
	}

	// One RUN changed (step 4): it and the steps after it run again.
	writeTree(t, ctxDir, map[string]string{
		"Dockerfile": strings.Replace(testDockerfile, "RUN id -u > /uid-at-build", "RUN echo changed > /uid-at-build", 1),
	})
	res = build(t, false, "web")
	if res.err != nil {
		t.Fatal(res.err)
	}
	t.Logf("rebuild with step 4 changed:\n%s", res.stderr)
	if ran, cached := stepsRun(res.stderr, steps); !slices.Equal(ran, seq(4, steps)) || !slices.Equal(cached, seq(1, 3)) {
		t.Errorf("changing step 4 ran steps %v and took %v from the cache; want 4-%d run, 1-3 cached", ran, cached, steps)
	}
	second, err := b.Lookup("web")
	if err != nil {
		t.Fatal(err)
	}
	if second.ID == first.ID {
		t.Fatalf("the changed Dockerfile built the same template %s", first.ID)
	}
	if got, _ := os.ReadFile(filepath.Join(second.RootFS, "uid-at-build")); string(got) != "changed\n" {
		t.Errorf("/uid-at-build = %q after the change", got)
	}

	// --no-cache runs every step again, into a new version.
	if res = build(t, true, "web"); res.err != nil {
		t.Fatal(res.err)
	}
	if ran, cached := stepsRun(res.stderr, steps); !slices.Equal(ran, seq(1, steps)) || len(cached) != 0 {
		t.Errorf("--no-cache ran steps %v and took %v from the cache; want all run", ran, cached)
	}
	third, err := b.Lookup("web")
	if err != nil {
		t.Fatal(err)
	}
	if third.ID == second.ID {
		t.Errorf("--no-cache gave the cached version %s", second.ID)
	}

	// A failing step: non-zero, names the step, its line, the exit code
	// and the last output; the previous version stays the template.
	failing := strings.Replace(testDockerfile, "RUN pwd > here",
		`RUN for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25; do echo line $i; done; echo oops >&2; exit 3`+"\nRUN pwd > here", 1)
	writeTree(t, ctxDir, map[string]string{"Dockerfile": failing})
	res = build(t, false, "web")
	if res.err == nil {
		t.Fatal("a build with a failing step succeeded")
	}
	t.Logf("failed build: %v", res.err)
	for _, want := range []string{
		filepath.Join(ctxDir, "Dockerfile") + " line 10: building template web-", "step 7 (RUN for i in 1 2",
		"failed with exit code 3", "line 25\n  oops",
	} {
		if !strings.Contains(res.err.Error(), want) {
			t.Errorf("error does not say %q", want)
		}
	}
	if strings.Contains(res.err.Error(), "line 5\n") {
		t.Errorf("error holds more than the last lines: %v", res.err)
	}
	if res.stdout != "" {
		t.Errorf("a failed build printed %q", res.stdout)
	}
	if got, err := b.Lookup("web"); err != nil || got.ID != third.ID {
		t.Errorf("after a failed build, web is %v, %v; want the previous %s", got, err, third.ID)
	}
	// The same failure under a new name leaves nothing to find.
	if res = build(t, false, "fresh"); res.err == nil {
		t.Fatal("a build with a failing step succeeded")
	}
	if _, err := b.Lookup("fresh"); !errors.Is(err, template.ErrNotFound) {
		t.Errorf("after a failed first build, Lookup(fresh) = %v, want not found", err)
	}
	if ms := mountsBelow(t, data); len(ms) > 0 {
		t.Errorf("left mounted: %v", ms)
	}

	// The built versions are listed, and go away with rm.
	res = runCLI(t, "", "template", "list", "--data-dir", data)
	for _, id := range []string{first.ID, second.ID, third.ID} {
		if !strings.Contains(res.stdout, id) {
			t.Errorf("list does not show %s:\n%s", id, res.stdout)
		}
	}
	if res = runCLI(t, "", "template", "rm", "--data-dir", data, "web"); res.err != nil || strings.Count(res.stdout, "removed ") != 3 {
		t.Errorf("rm web = %q, %v", res.stdout, res.err)
	}
	if _, err := b.Lookup("web"); !errors.Is(err, template.ErrNotFound) {
		t.Errorf("after rm, Lookup(web) = %v", err)
	}
}

// writeTree creates files (name: content) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
