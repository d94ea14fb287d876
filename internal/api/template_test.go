package api

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agent-sandbox/agent-sandbox/internal/fetch"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// fakeBuilder is a hand-written TemplateBuilder: Build logs one line per
// instruction (with its step) and succeeds, or fails with fail.
type fakeBuilder struct {
	dir  string
	fail error

	mu    sync.Mutex // guards specs and built
	specs []template.Spec
	built map[string]*template.Template
}

func (f *fakeBuilder) Build(ctx context.Context, spec template.Spec, log *slog.Logger) (*template.Template, error) {
	f.mu.Lock()
	f.specs = append(f.specs, spec)
	f.mu.Unlock()
	for i, in := range spec.Instructions {
		log.Info(in.String(), "step", i+1)
		log.Info(fmt.Sprintf("output of step %d", i+1), "step", i+1)
	}
	if f.fail != nil {
		return nil, f.fail
	}
	t := &template.Template{Name: spec.Name, ID: template.ID(spec.Name, "0123456789abcdef"), Spec: spec}
	f.mu.Lock()
	f.built[spec.Name] = t
	f.mu.Unlock()
	return t, nil
}

func (f *fakeBuilder) ContextArchive(h string) string { return filepath.Join(f.dir, h+".tar") }

func (f *fakeBuilder) List() ([]template.Template, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []template.Template
	for _, t := range f.built {
		out = append(out, *t)
	}
	slices.SortFunc(out, func(a, b template.Template) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (f *fakeBuilder) Remove(_ context.Context, ref string) ([]template.Template, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.built[ref]
	if !ok {
		return nil, template.ErrNotFound
	}
	delete(f.built, ref)
	return []template.Template{*t}, nil
}

func (f *fakeBuilder) Lookup(ref string) (*template.Template, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t, ok := f.built[ref]; ok {
		return t, nil
	}
	return nil, template.ErrNotFound
}

// newTemplateAPI returns an API with the template build API over a fresh
// store and f.
func newTemplateAPI(t testing.TB, f *fakeBuilder) *Handler {
	t.Helper()
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AddAPIKey(context.Background(), "test", testKey); err != nil {
		t.Fatal(err)
	}
	f.dir, f.built = t.TempDir(), map[string]*template.Template{}
	tb, err := NewTemplateBuilds(context.Background(), TemplateConfig{Builder: f, Records: st, MaxContextBytes: 1 << 20,
		Max: sandbox.Maxima{CPUCount: 4, MemoryMB: 4096}, SandboxDiskMB: 1024, Defaults: sandbox.Maxima{CPUCount: 2, MemoryMB: 512}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tb.Close()
		st.Close()
	})
	h := newHandler(t, newFake(), func(c *Config) { c.Keys = st; c.Templates = tb })
	return h
}

// call serves one request and decodes the JSON answer into out (if not nil).
func call(t *testing.T, h http.Handler, method, target, body string, header map[string]string, out any) int {
	t.Helper()
	w := serve(h, apiCase{method: method, target: target, body: body, header: header})
	if out != nil && w.Body.Len() > 0 {
		if err := json.Unmarshal(w.Body.Bytes(), out); err != nil {
			t.Fatalf("%s %s: decoding %q: %v", method, target, w.Body.String(), err)
		}
	}
	return w.Code
}

// tarGz returns a gzipped tar holding name with content.
func tarGz(t *testing.T, name, content string) string {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content))}); err != nil {
		t.Fatal(err)
	}
	tw.Write([]byte(content))
	tw.Close()
	zw.Close()
	return buf.String()
}

// waitBuild polls the build status until it is no longer building.
func waitBuild(t *testing.T, h http.Handler, tmpl, build string) buildStatusView {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var st buildStatusView
		if code := call(t, h, "GET", "/templates/"+tmpl+"/builds/"+build+"/status", "", nil, &st); code != 200 {
			t.Fatalf("status: %d", code)
		}
		if st.Status != "building" {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatal("build still building after 5 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

const testHash = "1111111111111111111111111111111111111111111111111111111111111111"

func TestTemplateBuildFlow(t *testing.T) {
	f := &fakeBuilder{}
	h := newTemplateAPI(t, f)

	var req templateView
	if code := call(t, h, "POST", "/v3/templates", `{"name":"demo:v1","tags":["stable"],"cpuCount":2,"memoryMB":1024,"minFreeDiskMb":512}`, nil, &req); code != 202 {
		t.Fatalf("request: %d", code)
	}
	if diff := cmp.Diff(templateView{TemplateID: "demo", BuildID: req.BuildID, Names: []string{"demo"},
		Tags: []string{"stable", "v1"}, Aliases: []string{"demo"}}, req); diff != "" {
		t.Errorf("request answer (-want +got):\n%s", diff)
	}

	// The upload link, the upload, and then the context is present.
	var link fileLinkView
	if code := call(t, h, "GET", "/templates/demo/files/"+testHash, "", nil, &link); code != 201 || link.Present {
		t.Fatalf("file link: %d %+v", code, link)
	}
	if want := "http://example.com/templates/demo/files/" + testHash; link.URL != want {
		t.Errorf("upload url %q, want %q", link.URL, want)
	}
	archive := tarGz(t, "greeting.txt", "hello\n")
	if code := call(t, h, "PUT", "/templates/demo/files/"+testHash, archive, map[string]string{"X-API-Key": ""}, nil); code != 403 {
		t.Errorf("upload without token: %d, want 403", code)
	}
	if code := call(t, h, "PUT", "/templates/demo/files/"+testHash, archive, link.Headers, nil); code != 200 {
		t.Fatalf("upload: %d", code)
	}
	if code := call(t, h, "PUT", "/templates/demo/files/"+testHash, archive, link.Headers, nil); code != 403 {
		t.Errorf("second upload with the same token: %d, want 403", code)
	}
	link = fileLinkView{}
	if code := call(t, h, "GET", "/templates/demo/files/"+testHash, "", nil, &link); code != 201 || !link.Present || link.URL != "" {
		t.Errorf("file link after upload: %d %+v", code, link)
	}

	// What the SDK sends for aptInstall, copy, runCmd, setEnvs, setWorkdir, setUser.
	body := `{"fromTemplate":"base","force":false,"steps":[
		{"type":"RUN","args":["apt-get update && apt-get install -y jq","root"],"force":false},
		{"type":"COPY","args":["greeting.txt","/home/user/greeting.txt","",""],"filesHash":"` + testHash + `","force":false,"gzip":true},
		{"type":"ENV","args":["A","1","B","2"],"force":false},
		{"type":"WORKDIR","args":["/srv"],"force":false},
		{"type":"USER","args":["user"],"force":true}],
		"startCmd":"python3 -m http.server 8000","readyCmd":"[ -n \"$(ss -Htuln sport = :8000)\" ]"}`
	if code := call(t, h, "POST", "/v2/templates/demo/builds/"+req.BuildID, body, nil, nil); code != 202 {
		t.Fatalf("trigger: %d", code)
	}
	st := waitBuild(t, h, "demo", req.BuildID)
	if st.Status != "ready" || st.Reason != nil {
		t.Fatalf("status %+v", st)
	}
	want := template.Spec{Name: "demo", From: "base", StartCmd: "python3 -m http.server 8000", ReadyPort: 8000,
		CPUCount: 2, MemoryMB: 1024, // the request's: what the template's sandboxes get
		Instructions: []template.Instruction{
			{Op: "RUN", Args: []string{"apt-get update && apt-get install -y jq"}, User: "root"},
			{Op: "COPY", Args: []string{"greeting.txt", "/home/user/greeting.txt"}, FilesHash: testHash},
			{Op: "ENV", Args: []string{"A", "1", "B", "2"}},
			{Op: "WORKDIR", Args: []string{"/srv"}},
			{Op: "USER", Args: []string{"user"}, Force: true},
		}}
	if diff := cmp.Diff([]template.Spec{want}, f.specs); diff != "" {
		t.Errorf("spec built (-want +got):\n%s", diff)
	}
	// Every step's lines carry its number; the log pages by logsOffset.
	var steps []string
	for _, e := range st.LogEntries {
		if e.Step != "" {
			steps = append(steps, e.Step+": "+e.Message)
		}
	}
	if len(steps) != 10 || steps[1] != "1: output of step 1" || steps[9] != "5: output of step 5" {
		t.Errorf("step log lines: %q", steps)
	}
	var page buildStatusView
	call(t, h, "GET", fmt.Sprintf("/templates/demo/builds/%s/status?logsOffset=%d", req.BuildID, len(st.LogEntries)-1), "", nil, &page)
	if len(page.LogEntries) != 1 || page.LogEntries[0] != st.LogEntries[len(st.LogEntries)-1] || len(page.Logs) != 1 {
		t.Errorf("last page: %+v", page)
	}
	call(t, h, "GET", fmt.Sprintf("/templates/demo/builds/%s/status?logsOffset=%d", req.BuildID, len(st.LogEntries)), "", nil, &page)
	if len(page.LogEntries) != 0 || page.Status != "ready" {
		t.Errorf("page past the end: %+v", page)
	}

	if code := call(t, h, "POST", "/v2/templates/demo/builds/"+req.BuildID, body, nil, nil); code != 409 {
		t.Errorf("second trigger: %d, want 409", code)
	}
	var alias map[string]any
	if code := call(t, h, "GET", "/templates/aliases/demo", "", nil, &alias); code != 200 || alias["templateID"] != "demo" {
		t.Errorf("alias: %d %v", code, alias)
	}
	var tags []tagView
	call(t, h, "GET", "/templates/demo/tags", "", nil, &tags)
	if len(tags) != 2 || tags[0].Tag != "stable" || tags[1].Tag != "v1" || tags[0].BuildID != req.BuildID {
		t.Errorf("tags: %+v", tags)
	}
	var assigned map[string]any
	if code := call(t, h, "POST", "/templates/tags", `{"target":"demo:v1","tags":["prod"]}`, nil, &assigned); code != 201 || assigned["buildID"] != req.BuildID {
		t.Errorf("assign tags: %d %v", code, assigned)
	}
	if code := call(t, h, "DELETE", "/templates/tags", `{"name":"demo","tags":["prod"]}`, nil, nil); code != 204 {
		t.Errorf("remove tags: %d", code)
	}
	if code := call(t, h, "DELETE", "/templates/tags", `{"name":"demo","tags":["prod"]}`, nil, nil); code != 404 {
		t.Errorf("remove a removed tag: %d, want 404", code)
	}
}

func TestTemplateBuildStepFailure(t *testing.T) {
	in := template.Instruction{Op: "RUN", Args: []string{"exit 3"}}
	f := &fakeBuilder{fail: fmt.Errorf("building template x: %w", &template.StepError{
		Step: 2, Instruction: in, ExitCode: 3, LogTail: []string{"about to fail"}})}
	h := newTemplateAPI(t, f)
	var req templateView
	call(t, h, "POST", "/v3/templates", `{"name":"broken"}`, nil, &req)
	if req.Tags[0] != "default" {
		t.Errorf("tags %q, want [default]", req.Tags)
	}
	body := `{"fromTemplate":"base","steps":[{"type":"RUN","args":["true"]},{"type":"RUN","args":["exit 3"]}]}`
	if code := call(t, h, "POST", "/v2/templates/broken/builds/"+req.BuildID, body, nil, nil); code != 202 {
		t.Fatalf("trigger: %d", code)
	}
	st := waitBuild(t, h, "broken", req.BuildID)
	if st.Status != "error" || st.Reason == nil {
		t.Fatalf("status %+v", st)
	}
	if st.Reason.Step != "2" || !strings.HasPrefix(st.Reason.Message, "step 2 (RUN exit 3) failed with exit code 3") ||
		len(st.Reason.LogEntries) != 1 || st.Reason.LogEntries[0].Message != "about to fail" {
		t.Errorf("reason %+v", st.Reason)
	}
	if last := st.LogEntries[len(st.LogEntries)-1]; last.Level != "error" || !strings.Contains(last.Message, "step 2") {
		t.Errorf("last log line %+v", last)
	}
	// No template: the alias is unknown, no tag was given out.
	if code := call(t, h, "GET", "/templates/aliases/broken", "", nil, nil); code != 404 {
		t.Errorf("alias of a failed build: %d, want 404", code)
	}
	var tags []tagView
	call(t, h, "GET", "/templates/broken/tags", "", nil, &tags)
	if len(tags) != 0 {
		t.Errorf("tags of a failed build: %+v", tags)
	}
}

// Every ready command the Template SDK can express reaches the builder:
// waitForPort with a start command as a port the server dials, anything
// else as a command polled at build and at create.
func TestTemplateReadyCmd(t *testing.T) {
	for _, c := range []struct {
		name, start, ready string
		port               int
		cmd                string
	}{
		{"waitForPort", "python3 -m http.server 8000", `[ -n \"$(ss -Htuln sport = :8000)\" ]`, 8000, ""},
		{"waitForPort without a start command", "", `[ -n \"$(ss -Htuln sport = :8000)\" ]`, 0, `[ -n "$(ss -Htuln sport = :8000)" ]`},
		{"waitForURL", "srv", `curl -s -o /dev/null -w \"%{http_code}\" http://localhost:3000/health | grep -q \"200\"`, 0,
			`curl -s -o /dev/null -w "%{http_code}" http://localhost:3000/health | grep -q "200"`},
		{"waitForFile", "srv", `[ -f /tmp/ready ]`, 0, `[ -f /tmp/ready ]`},
		{"waitForProcess", "srv", `pgrep nginx > /dev/null`, 0, `pgrep nginx > /dev/null`},
		{"waitForTimeout", "", `sleep 3`, 0, `sleep 3`},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeBuilder{}
			h := newTemplateAPI(t, f)
			var req templateView
			call(t, h, "POST", "/v3/templates", `{"name":"ready"}`, nil, &req)
			body := `{"fromTemplate":"base","startCmd":"` + c.start + `","readyCmd":"` + c.ready + `"}`
			if code := call(t, h, "POST", "/v2/templates/ready/builds/"+req.BuildID, body, nil, nil); code != 202 {
				t.Fatalf("trigger: %d", code)
			}
			waitBuild(t, h, "ready", req.BuildID)
			if len(f.specs) != 1 || f.specs[0].StartCmd != c.start || f.specs[0].ReadyPort != c.port || f.specs[0].ReadyCmd != c.cmd {
				t.Errorf("specs %+v\nwant start %q, ready port %d, ready command %q", f.specs, c.start, c.port, c.cmd)
			}
		})
	}
}

// A ready command that does not succeed fails the build at E2B's step
// "finalize", naming the command and the server's limit.
func TestTemplateBuildNotReady(t *testing.T) {
	f := &fakeBuilder{fail: fmt.Errorf("building template x: %w", &template.ReadyError{
		StartCmd: "srv", ReadyCmd: "false", Timeout: 30 * time.Second, ReadyExit: 1, LogTail: []string{"listening"}})}
	h := newTemplateAPI(t, f)
	var req templateView
	call(t, h, "POST", "/v3/templates", `{"name":"slow"}`, nil, &req)
	if code := call(t, h, "POST", "/v2/templates/slow/builds/"+req.BuildID, `{"fromTemplate":"base","startCmd":"srv","readyCmd":"false"}`, nil, nil); code != 202 {
		t.Fatalf("trigger: %d", code)
	}
	st := waitBuild(t, h, "slow", req.BuildID)
	want := `ready command "false" did not succeed within 30s (its last run exited with code 1); last output:` + "\n  listening\n" +
		"(the server's limit for a build's ready command: serve --build-ready-timeout)"
	if st.Status != "error" || st.Reason == nil || st.Reason.Step != "finalize" || st.Reason.Message != want ||
		len(st.Reason.LogEntries) != 1 || st.Reason.LogEntries[0].Step != "finalize" {
		t.Errorf("status %s, reason %+v\nwant step finalize and message %q", st.Status, st.Reason, want)
	}
}

// GET /templates lists every template in E2B's shape, DELETE
// /templates/{id} deletes one (by name or name:tag) once nothing runs
// over it.
func TestTemplateListAndDelete(t *testing.T) {
	f := &fakeBuilder{}
	h := newTemplateAPI(t, f)
	builtAt := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.built["base"] = &template.Template{Name: "base", ID: "base-0123456789ab", BuiltAt: builtAt}
	build := func(name, body, trigger string) string {
		var req templateView
		call(t, h, "POST", "/v3/templates", body, nil, &req)
		if code := call(t, h, "POST", "/v2/templates/"+name+"/builds/"+req.BuildID, trigger, nil, nil); code != 202 {
			t.Fatalf("trigger %s: %d", name, code)
		}
		waitBuild(t, h, name, req.BuildID)
		return req.BuildID
	}
	demoBuild := build("demo", `{"name":"demo","cpuCount":1,"memoryMB":768}`, `{"fromTemplate":"base"}`)
	build("other", `{"name":"other"}`, `{"fromTemplate":"base","recording":"webm"}`)

	var list []templateListItem
	if code := call(t, h, "GET", "/templates?teamID=x", "", nil, &list); code != 200 {
		t.Fatalf("list: %d", code)
	}
	var got []string
	for _, it := range list {
		got = append(got, fmt.Sprintf("%s %s %s %d cpu=%d mem=%d disk=%d envd=%s builds=%d", it.TemplateID, it.BuildID, it.BuildStatus,
			len(it.Aliases), it.CPUCount, it.MemoryMB, it.DiskSizeMB, it.EnvdVersion, it.BuildCount))
	}
	want := []string{
		"base base-0123456789ab ready 1 cpu=2 mem=512 disk=1024 envd=0.6.4 builds=1",
		"demo " + demoBuild + " ready 1 cpu=1 mem=768 disk=1024 envd=0.6.4 builds=1",
	}
	if len(got) != 3 || got[0] != want[0] || got[1] != want[1] || !strings.HasPrefix(got[2], "other ") {
		t.Fatalf("list:\n%s\nwant base and demo as\n%s\nthen other", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The recording a build asked for is shown with it; none is absent.
	if list[1].Recording != "" || list[2].Recording != "webm" {
		t.Errorf("recordings of demo and other: %q, %q; want none and webm", list[1].Recording, list[2].Recording)
	}
	// The fields the CLI prints and E2B's schema requires are there.
	var raw []map[string]any
	call(t, h, "GET", "/templates", "", nil, &raw)
	for _, key := range []string{"templateID", "buildID", "buildStatus", "buildCount", "cpuCount", "memoryMB", "diskSizeMB", "envdVersion",
		"public", "aliases", "names", "createdBy", "createdAt", "updatedAt", "lastSpawnedAt", "spawnCount"} {
		if _, ok := raw[0][key]; !ok {
			t.Errorf("list item lacks %s: %v", key, raw[0])
		}
	}

	// Built-in templates the server builds itself are listed while they
	// build (over an older version too) and when the build failed.
	h.templates.builtIns = func() map[string]store.BuildStatus {
		return map[string]store.BuildStatus{"base": store.BuildBuilding, "desktop": store.BuildBuilding, "browser": store.BuildError}
	}
	call(t, h, "GET", "/templates", "", nil, &list)
	got = got[:0]
	for _, it := range list {
		got = append(got, it.TemplateID+" "+it.BuildStatus+" "+it.BuildID)
	}
	if want := "base building base-0123456789ab,browser error ,demo ready " + demoBuild + ",desktop building ,other ready "; !strings.HasPrefix(strings.Join(got, ","), want) {
		t.Errorf("list with built-ins building:\n%s\nwant it to start\n%s", strings.Join(got, ","), want)
	}
	h.templates.builtIns = nil

	fake := h.sandboxes.(*fakeSandboxes)
	fake.templateUsers = "i1"
	var e errorBody
	if code := call(t, h, "DELETE", "/templates/demo", "", nil, &e); code != 400 || !strings.Contains(e.Message, "running or paused sandboxes using it (i1)") {
		t.Errorf("delete while in use: %d %+v", code, e)
	}
	fake.templateUsers = ""
	if code := call(t, h, "DELETE", "/templates/demo%3Adefault", "", nil, nil); code != 204 {
		t.Fatalf("delete demo:default: %d", code)
	}
	if _, ok := f.built["demo"]; ok {
		t.Error("demo's files are still in the cache")
	}
	if code := call(t, h, "GET", "/templates/demo/tags", "", nil, nil); code != 404 {
		t.Errorf("tags of the deleted template: %d, want 404", code)
	}
	call(t, h, "GET", "/templates", "", nil, &list)
	if len(list) != 2 || list[1].TemplateID != "other" {
		t.Errorf("list after the delete: %+v", list)
	}
	for _, c := range []struct {
		path    string
		status  int
		message string
	}{
		{"/templates/demo", 404, "template 'demo' not found"},
		{"/templates/base", 400, "template 'base' is built in"},
		{"/templates/No%20Such", 404, "snapshot 'No Such' not found"},
	} {
		e = errorBody{}
		if code := call(t, h, "DELETE", c.path, "", nil, &e); code != c.status || !strings.Contains(e.Message, c.message) {
			t.Errorf("DELETE %s: %d %+v, want %d with %q", c.path, code, e, c.status, c.message)
		}
	}
}

// TestTemplateBuildRefusedPull: a pull the fetch rules refused fails the
// build with the refusal alone, not the registry client's text around it.
func TestTemplateBuildRefusedPull(t *testing.T) {
	refused := &fetch.RefusedError{Host: "127.0.0.1", Port: "5000", Addr: netip.MustParseAddr("127.0.0.1"),
		Range: netip.MustParsePrefix("127.0.0.0/8"), Kind: "loopback"}
	f := &fakeBuilder{fail: fmt.Errorf("pulling 127.0.0.1:5000/x: Get \"https://127.0.0.1:5000/v2/\": %w", refused)}
	h := newTemplateAPI(t, f)
	var req templateView
	call(t, h, "POST", "/v3/templates", `{"name":"img"}`, nil, &req)
	if code := call(t, h, "POST", "/v2/templates/img/builds/"+req.BuildID, `{"fromImage":"127.0.0.1:5000/x"}`, nil, nil); code != 202 {
		t.Fatalf("trigger: %d", code)
	}
	st := waitBuild(t, h, "img", req.BuildID)
	want := "fromImage: registry 127.0.0.1:5000 resolves to 127.0.0.1, in the loopback range 127.0.0.0/8: refused; allow it with --registry 127.0.0.1:5000"
	if st.Status != "error" || st.Reason == nil || st.Reason.Message != want {
		t.Errorf("status %s, reason %+v\nwant message %q", st.Status, st.Reason, want)
	}
}

func TestTemplateAPIValidation(t *testing.T) {
	h := newTemplateAPI(t, &fakeBuilder{})
	var req templateView
	call(t, h, "POST", "/v3/templates", `{"name":"ok"}`, nil, &req)
	trigger := "/v2/templates/ok/builds/" + req.BuildID
	fileURL := "/templates/ok/files/" + testHash
	var link fileLinkView
	call(t, h, "GET", fileURL, "", nil, &link)

	cases := []struct {
		name, method, target, body string
		header                     map[string]string
		status                     int
		message                    string // substring of the error message
	}{
		{"no name", "POST", "/v3/templates", `{}`, nil, 400, "name is required"},
		{"bad name", "POST", "/v3/templates", `{"name":"Bad Name"}`, nil, 400, "want a template name"},
		{"bad tag", "POST", "/v3/templates", `{"name":"x:no way"}`, nil, 400, `tag "no way"`},
		{"bad tags", "POST", "/v3/templates", `{"name":"x","tags":["-x"]}`, nil, 400, `tag "-x"`},
		{"built-in", "POST", "/v3/templates", `{"name":"base"}`, nil, 400, "built-in template"},
		{"negative memory", "POST", "/v3/templates", `{"name":"x","memoryMB":-1}`, nil, 400, "memoryMB must not be negative"},
		{"cpu above the maximum", "POST", "/v3/templates", `{"name":"x","cpuCount":5}`, nil, 400,
			"cpuCount 5 is more than this server allows: at most 4 (serve --max-cpu-count)"},
		{"memory above the maximum", "POST", "/v3/templates", `{"name":"x","memoryMB":8192}`, nil, 400,
			"memoryMB 8192 is more than this server allows: at most 4096 (serve --max-memory-mb)"},
		{"free disk above the disk", "POST", "/v3/templates", `{"name":"x","minFreeDiskMb":2048}`, nil, 400,
			"minFreeDiskMb 2048 is more than this server gives: every sandbox starts with its whole disk of 1024 MiB free"},
		{"no key", "POST", "/v3/templates", `{"name":"x"}`, map[string]string{"X-API-Key": ""}, 401, "missing API key"},
		{"unknown template files", "GET", "/templates/nope/files/" + testHash, "", nil, 404, `template "nope"`},
		{"bad hash", "GET", "/templates/ok/files/ABC", "", nil, 400, "files hash"},
		{"upload not a tar", "PUT", fileURL, "not a tar archive at all", link.Headers, 400, "build context: malformed tar"},
		{"unknown build", "POST", "/v2/templates/ok/builds/nope", `{"fromTemplate":"base"}`, nil, 404, `build "nope"`},
		{"build of another template", "POST", "/v2/templates/other/builds/" + req.BuildID, `{"fromTemplate":"base"}`, nil, 404, "doesn't exist"},
		{"no from", "POST", trigger, `{"steps":[]}`, nil, 400, "fromTemplate or fromImage is required"},
		{"image tarball", "POST", trigger, `{"fromImage":"docker-archive:/etc/img.tar"}`, nil, 400, "only registry images"},
		{"bad image", "POST", trigger, `{"fromImage":"Not An Image"}`, nil, 400, `image reference "Not An Image"`},
		{"registry without password", "POST", trigger, `{"fromImage":"x","fromImageRegistry":{"type":"registry","username":"u"}}`, nil, 400, "username and password are required"},
		{"aws registry", "POST", trigger, `{"fromImage":"x","fromImageRegistry":{"type":"aws","awsRegion":"eu-west-1"}}`, nil, 400, "AWS credentials are not supported"},
		{"registry without image", "POST", trigger, `{"fromTemplate":"base","fromImageRegistry":{"type":"registry","username":"u","password":"p"}}`, nil, 400, "fromImage, which is not given"},
		{"unknown step", "POST", trigger, `{"fromTemplate":"base","steps":[{"type":"ADD","args":["a","b"]}]}`, nil, 400, "step 1 (ADD): unknown step type"},
		{"empty run", "POST", trigger, `{"fromTemplate":"base","steps":[{"type":"RUN","args":[" "]}]}`, nil, 400, "step 1 (RUN): RUN wants one non-empty command"},
		{"bad run user", "POST", trigger, `{"fromTemplate":"base","steps":[{"type":"RUN","args":["true","-rf"]}]}`, nil, 400, "step 1 (RUN)"},
		{"copy not uploaded", "POST", trigger, `{"fromTemplate":"base","steps":[{"type":"COPY","args":["a","/a","",""],"filesHash":"` + strings.Repeat("2", 64) + `"}]}`, nil, 400, "were not uploaded"},
		{"copy bad hash", "POST", trigger, `{"fromTemplate":"base","steps":[{"type":"COPY","args":["a","/a"],"filesHash":"xyz"}]}`, nil, 400, "filesHash"},
		{"copy mode", "POST", trigger, `{"fromTemplate":"base","steps":[{"type":"COPY","args":["a","/a","","0755"],"filesHash":"` + testHash + `"}]}`, nil, 400, "mode 0755"},
		{"copy escapes", "POST", trigger, `{"fromTemplate":"base","steps":[{"type":"COPY","args":["../a","/a"],"filesHash":"` + testHash + `"}]}`, nil, 400, "outside the build context"},
		{"long ready cmd", "POST", trigger, `{"fromTemplate":"base","startCmd":"x","readyCmd":"` + strings.Repeat("x", 70000) + `"}`, nil, 400, "longer than 65536 bytes"},
		{"from itself", "POST", trigger, `{"fromTemplate":"ok"}`, nil, 400, "is not another template's name"},
		{"unknown recording format", "POST", trigger, `{"fromTemplate":"desktop","recording":"gif"}`, nil, 400, `template ok: recording: want mp4 or webm, got "gif"`},
		{"bad offset", "GET", "/templates/ok/builds/" + req.BuildID + "/status?logsOffset=-1", "", nil, 400, "logsOffset"},
		{"unknown build status", "GET", "/templates/ok/builds/nope/status", "", nil, 404, `build "nope"`},
		{"unknown template tags", "GET", "/templates/nope/tags", "", nil, 404, `template "nope"`},
		{"bad alias", "GET", "/templates/aliases/Nope", "", nil, 400, "not a template name"},
		{"unknown alias", "GET", "/templates/aliases/nope", "", nil, 404, "not found"},
		{"assign from unknown tag", "POST", "/templates/tags", `{"target":"ok:v9","tags":["x"]}`, nil, 404, `no tag "v9"`},
		{"assign no tags", "POST", "/templates/tags", `{"target":"ok:v9","tags":[]}`, nil, 400, "at least one tag"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var e errorBody
			if code := call(t, h, c.method, c.target, c.body, c.header, &e); code != c.status {
				t.Fatalf("status %d (%+v), want %d", code, e, c.status)
			}
			if e.Code != c.status || !strings.Contains(e.Message, c.message) {
				t.Errorf("body %+v, want code %d and a message with %q", e, c.status, c.message)
			}
		})
	}
	// Every refused trigger left the build waiting: a valid one still starts it.
	if code := call(t, h, "POST", trigger, `{"fromTemplate":"base"}`, nil, nil); code != 202 {
		t.Errorf("valid trigger after refused ones: %d", code)
	}
}
