package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// putTemplate places a finished template named name in dataDir's cache,
// as a build leaves it (the layout in package template's doc), with a
// root filesystem that fill makes. It stands in for a base template that
// would take debootstrap to build.
func putTemplate(t *testing.T, dataDir, name string, builtAt time.Time, fill func(rootfs string) error) *template.Template {
	t.Helper()
	sum := sha256.Sum256([]byte(name + builtAt.String()))
	hash := hex.EncodeToString(sum[:])
	dir := filepath.Join(dataDir, "templates", name, hash)
	rootfs := filepath.Join(dir, "rootfs")
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fill(rootfs); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"LANG": "C.UTF-8"}
	tmpl := &template.Template{
		Name: name, ID: template.ID(name, hash), Hash: hash, RootFS: rootfs,
		User: template.DefaultUser, Workdir: template.DefaultWorkdir, Env: env,
		BuiltAt: builtAt.UTC(), BuildDuration: time.Second, SizeBytes: 3 << 20, BuilderVersion: template.BuilderVersion,
		Spec: template.Spec{Name: name, Suite: "bookworm", Variant: "minbase",
			User: template.DefaultUser, Workdir: template.DefaultWorkdir, Env: env},
	}
	data, err := json.Marshal(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "template.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return tmpl
}

func emptyRootfs(string) error { return nil }

func TestTemplateListAndRm(t *testing.T) {
	data := t.TempDir()
	if res := runCLI(t, "", "template", "list", "--data-dir", data); res.err != nil || res.stdout != "NAME  ID  BUILT  SIZE\n" {
		t.Errorf("list of an empty cache = %q, %v; want the header alone", res.stdout, res.err)
	}
	day := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	old := putTemplate(t, data, "web", day, emptyRootfs)
	newer := putTemplate(t, data, "web", day.Add(time.Hour), emptyRootfs)
	other := putTemplate(t, data, "api", day, emptyRootfs)

	res := runCLI(t, "", "template", "list", "--data-dir", data)
	if res.err != nil {
		t.Fatal(res.err)
	}
	want := []string{
		"NAME  ID                BUILT                 SIZE",
		"api   " + other.ID + "  2026-11-01T12:00:00Z  3 MiB",
		"web   " + newer.ID + "  2026-11-01T13:00:00Z  3 MiB",
		"web   " + old.ID + "  2026-11-01T12:00:00Z  3 MiB",
	}
	if got := strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("list:\n%s\nwant:\n%s", res.stdout, strings.Join(want, "\n"))
	}

	// One version by ID.
	res = runCLI(t, "", "template", "rm", "--data-dir", data, old.ID)
	if res.err != nil || res.stdout != "removed "+old.ID+" (built 2026-11-01T12:00:00Z, 3 MiB)\n" {
		t.Errorf("rm by ID = %q, %v", res.stdout, res.err)
	}
	b := &template.Builder{DataDir: data}
	if got, err := b.Lookup("web"); err != nil || got.ID != newer.ID {
		t.Errorf("after removing the old version, web is %v, %v; want %s", got, err, newer.ID)
	}
	// Every version by name; the other template stays.
	putTemplate(t, data, "web", day.Add(2*time.Hour), emptyRootfs)
	res = runCLI(t, "", "template", "rm", "web", "--data-dir", data)
	if res.err != nil || strings.Count(res.stdout, "removed web-") != 2 {
		t.Errorf("rm by name = %q, %v; want two versions removed", res.stdout, res.err)
	}
	if _, err := b.Lookup("web"); !errors.Is(err, template.ErrNotFound) {
		t.Errorf("after rm, Lookup(web) = %v, want not found", err)
	}
	if _, err := os.Stat(filepath.Join(data, "templates", "web")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the removed template's directory is still there: %v", err)
	}
	if _, err := b.Lookup("api"); err != nil {
		t.Errorf("rm web removed api: %v", err)
	}
	// Unknown: refused, nothing removed.
	res = runCLI(t, "", "template", "rm", "--data-dir", data, "web")
	if res.err == nil || !strings.Contains(res.err.Error(), `template rm: no template named "web" or with that ID in `+data) || res.stdout != "" {
		t.Errorf("rm of an unknown template = %q, %v", res.stdout, res.err)
	}
}

func TestTemplateBuildErrors(t *testing.T) {
	data, ctxDir := t.TempDir(), t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(ctxDir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	unsupported := write("Dockerfile.expose", "FROM base\nRUN true\nEXPOSE 8080\n")
	multi := write("Dockerfile.multi", "FROM base AS a\nFROM base\n")
	missingCopy := write("Dockerfile.copy", "FROM base\nCOPY nope.txt /\n")
	fine := write("Dockerfile.fine", "FROM base\nRUN true\n")
	write("Dockerfile", "FROM no-such-template\nRUN true\n")
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "no name", args: []string{"-f", unsupported}, wantErr: "want NAME and optionally CONTEXT_DIR"},
		{name: "too many arguments", args: []string{"a", ctxDir, "c"}, wantErr: "want NAME and optionally CONTEXT_DIR"},
		{name: "no Dockerfile", args: []string{"img", t.TempDir()}, wantErr: "reading Dockerfile: open "},
		{name: "context is a file", args: []string{"--file", unsupported, "img", unsupported}, wantErr: "is not a directory"},
		{name: "bad name", args: []string{"Bad_Name", ctxDir}, wantErr: `template name "Bad_Name"`},
		{name: "unsupported instruction", args: []string{"-f", unsupported, "img"},
			wantErr: unsupported + " line 3: EXPOSE is not supported (supported: FROM, RUN, COPY, ADD, ENV, WORKDIR, USER, ARG, CMD, ENTRYPOINT)"},
		{name: "multi-stage", args: []string{"-f", multi, "img"}, wantErr: multi + " line 2: a second FROM: multi-stage builds are not supported"},
		{name: "COPY of a missing file", args: []string{"-f", missingCopy, "img"}, wantErr: missingCopy + " line 2: COPY nope.txt: no such file in the build context"},
		{name: "unknown FROM", args: []string{"img", ctxDir}, wantErr: `from no-such-template: template "no-such-template": template not found`},
		{name: "bad build arg", args: []string{"--build-arg", "novalue", "img"}, wantErr: `"novalue" is not KEY=VALUE`},
		{name: "unknown recording format", args: []string{"-f", fine, "--recording", "avi", "img"}, wantErr: `template img: recording: want mp4 or webm, got "avi"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runCLI(t, "", append([]string{"template", "build", "--data-dir", data}, tt.args...)...)
			if res.err == nil || !strings.Contains(res.err.Error(), tt.wantErr) {
				t.Errorf("error = %v, want it to contain %q", res.err, tt.wantErr)
			}
			if res.stdout != "" {
				t.Errorf("a failed build printed %q", res.stdout)
			}
		})
	}
	if ts, err := (&template.Builder{DataDir: data}).List(); err != nil || len(ts) != 0 {
		t.Errorf("failed builds left templates %v, %v", ts, err)
	}
}

func TestBuildRequestDefaults(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name              string
		req               buildRequest
		wantFile, wantCtx string
	}{
		{name: "nothing given", req: buildRequest{}, wantFile: "Dockerfile", wantCtx: "."},
		{name: "context only", req: buildRequest{contextDir: dir}, wantFile: filepath.Join(dir, "Dockerfile"), wantCtx: dir},
		{name: "Dockerfile only", req: buildRequest{file: filepath.Join(dir, "build.Dockerfile")}, wantFile: filepath.Join(dir, "build.Dockerfile"), wantCtx: dir},
		{name: "both", req: buildRequest{file: "/x/Dockerfile", contextDir: dir}, wantFile: "/x/Dockerfile", wantCtx: dir},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.req
			if err := r.resolve(); err != nil {
				t.Fatal(err)
			}
			if r.file != tt.wantFile || r.contextDir != tt.wantCtx {
				t.Errorf("resolved to file %q, context %q; want %q, %q", r.file, r.contextDir, tt.wantFile, tt.wantCtx)
			}
		})
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 1023: "1023 B", 1024: "1 KiB", 1536: "1.5 KiB", 3 << 20: "3 MiB", 5<<30 + 1<<29: "5.5 GiB",
	} {
		if got := formatSize(n); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", n, got, want)
		}
	}
}
