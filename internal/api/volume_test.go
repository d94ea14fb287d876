package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/volume"
)

// dirStorage keeps each volume in a plain directory: volume.Storage for
// tests, which need no mounts.
type dirStorage string

func (d dirStorage) Create(_ context.Context, id string, _ int64) error {
	return os.Mkdir(filepath.Join(string(d), id), 0o777)
}
func (d dirStorage) Path(_ context.Context, id string) (string, error) {
	return filepath.Join(string(d), id), nil
}
func (d dirStorage) Remove(_ context.Context, id string) error {
	return os.RemoveAll(filepath.Join(string(d), id))
}
func (d dirStorage) List(context.Context) ([]string, error) { return nil, nil }

// volumeServer serves the API with real volumes over dirStorage in dir.
func volumeServer(t *testing.T) (srv *httptest.Server, dir string) {
	t.Helper()
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	dir = t.TempDir()
	svc, err := volume.New(volume.Config{Records: st, Storage: dirStorage(dir), Size: 1 << 20, KeyFile: filepath.Join(dir, "key")})
	if err != nil {
		t.Fatal(err)
	}
	h := newHandler(t, newFake(), func(c *Config) { c.Volumes = svc })
	srv = httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, dir
}

// do sends a request and decodes a JSON answer into out (when not nil).
func do(t *testing.T, srv *httptest.Server, method, target string, hdr map[string]string, body string, out any) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+target, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if out != nil && res.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, target, err, b)
		}
	}
	return res.StatusCode, string(b)
}

func TestVolumeAPI(t *testing.T) {
	srv, dir := volumeServer(t)
	key := map[string]string{"X-API-Key": testKey}
	var v volumeView
	if code, body := do(t, srv, "POST", "/volumes", key, `{"name":"data"}`, &v); code != 201 || v.Token == "" || v.Name != "data" {
		t.Fatalf("create: %d %s", code, body)
	}
	for body, want := range map[string]string{
		`{"name":"data"}`:    "Volume with name 'data' already exists",
		`{"name":"a b"}`:     "Invalid volume name",
		`{"name":"../../x"}`: "Invalid volume name",
	} {
		if code, got := do(t, srv, "POST", "/volumes", key, body, nil); code != 400 || !strings.Contains(got, want) {
			t.Errorf("create %s: %d %s, want 400 %q", body, code, got, want)
		}
	}
	if code, _ := do(t, srv, "GET", "/volumes", nil, "", nil); code != 401 {
		t.Errorf("list without a key: %d", code)
	}
	var list []volumeView
	if code, body := do(t, srv, "GET", "/volumes", key, "", &list); code != 200 || len(list) != 1 || list[0].Token != "" {
		t.Errorf("list: %d %s", code, body)
	}
	var again volumeView
	if code, body := do(t, srv, "GET", "/volumes/"+v.VolumeID, key, "", &again); code != 200 || again.Token == "" {
		t.Errorf("get: %d %s", code, body)
	}
	if code, _ := do(t, srv, "GET", "/volumes/nope", key, "", nil); code != 404 {
		t.Errorf("get unknown: %d", code)
	}

	bearer := map[string]string{"Authorization": "Bearer " + v.Token}
	content := func(method, route, query, body string, out any) (int, string) {
		t.Helper()
		return do(t, srv, method, "/volumecontent/"+v.VolumeID+"/"+route+"?"+query, bearer, body, out)
	}
	var e entryView
	if code, body := content("PUT", "file", "path=/a.txt&uid=1000&gid=1000&mode=420", "hello", &e); code != 201 ||
		e.Name != "a.txt" || e.Type != "file" || e.Size != 5 || e.UID != 1000 || e.Mode != 0o644 || e.Path != "/a.txt" {
		t.Fatalf("write: %d %s", code, body)
	}
	if code, body := content("PUT", "file", "path=/a.txt", "again", nil); code != 409 || !strings.Contains(body, `"code":"409"`) {
		t.Errorf("overwrite without force: %d %s", code, body)
	}
	if code, _ := content("PUT", "file", "path=/a.txt&force=true", "", &e); code != 201 || e.Size != 0 || e.UID != 0 {
		t.Errorf("overwrite with force: %d %+v", code, e)
	}
	if code, body := content("PUT", "file", "path=/missing/b.txt", "x", nil); code != 404 {
		t.Errorf("write under a missing dir: %d %s", code, body)
	}
	if code, body := content("POST", "dir", "path=/d/e/f", "", nil); code != 404 {
		t.Errorf("mkdir without parents: %d %s", code, body)
	}
	if code, body := content("POST", "dir", "path=/d/e/f&force=true&mode=493", "", &e); code != 201 || e.Type != "directory" || e.Mode != 0o755 {
		t.Errorf("mkdir -p: %d %s", code, body)
	}
	if code, _ := content("POST", "dir", "path=/d", "", nil); code != 409 {
		t.Errorf("mkdir of an existing dir without force: %d", code)
	}
	content("PUT", "file", "path="+url.QueryEscape("/d/e/f/deep.txt"), "deep", nil)
	var entries []entryView
	if code, body := content("GET", "dir", "path=/d&depth=3", "", &entries); code != 200 || len(entries) != 3 || entries[2].Path != "/d/e/f/deep.txt" {
		t.Errorf("list depth 3: %d %s", code, body)
	}
	if code, body := content("GET", "dir", "path=/", "", &entries); code != 200 || len(entries) != 2 {
		t.Errorf("list /: %d %s", code, body)
	}
	if code, body := content("GET", "file", "path=/d/e/f/deep.txt", "", nil); code != 200 || body != "deep" {
		t.Errorf("read: %d %q", code, body)
	}
	if code, body := content("PATCH", "path", "path=/d", `{"uid":1001,"mode":448}`, &e); code != 200 || e.UID != 1001 || e.Mode != 0o700 {
		t.Errorf("patch: %d %s", code, body)
	}
	if code, _ := content("GET", "path", "path=/../../etc/passwd", "", nil); code != 404 {
		t.Errorf("a path out of the volume: %d", code)
	}
	// A sandbox may leave a symlink out: it is not followed there.
	if err := os.Symlink("/etc", filepath.Join(dir, v.VolumeID, "escape")); err != nil {
		t.Fatal(err)
	}
	if code, body := content("GET", "file", "path=/escape/passwd", "", nil); code == 200 {
		t.Errorf("a symlink led out of the volume: %s", body)
	}
	if code, body := content("GET", "path", "path=/escape", "", &e); code != 200 || e.Type != "symlink" || e.Target != "/etc" {
		t.Errorf("stat of the symlink: %d %s", code, body)
	}
	if code, _ := content("DELETE", "path", "path=/d", "", nil); code != 204 {
		t.Errorf("remove: %d", code)
	}
	if code, _ := content("DELETE", "path", "path=/d", "", nil); code != 404 {
		t.Errorf("remove again: %d", code)
	}
	if code, _ := content("GET", "path", "path=/a.txt", "", nil); code != 200 {
		t.Errorf("stat: %d", code)
	}
	for name, hdr := range map[string]map[string]string{
		"no token": nil, "a wrong token": {"Authorization": "Bearer " + v.Token + "x"}, "an API key": key,
	} {
		if code, _ := do(t, srv, "GET", "/volumecontent/"+v.VolumeID+"/path?path=/a.txt", hdr, "", nil); code != 401 {
			t.Errorf("content with %s: %d", name, code)
		}
	}
	if code, _ := do(t, srv, "DELETE", "/volumes/"+v.VolumeID, key, "", nil); code != 204 {
		t.Errorf("destroy: %d", code)
	}
	if code, _ := do(t, srv, "DELETE", "/volumes/"+v.VolumeID, key, "", nil); code != 404 {
		t.Errorf("destroy again: %d", code)
	}
}
