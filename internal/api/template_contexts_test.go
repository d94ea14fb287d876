package api

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// tarGzOfSize returns a gzipped tar holding one file of n zero bytes:
// a gzip bomb when n is large (the zeros compress a thousandfold).
func tarGzOfSize(t *testing.T, n int) string {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: "zeros", Mode: 0o644, Size: int64(n)}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	tw.Close()
	zw.Close()
	return buf.String()
}

// TestContextUncompressedLimit: an upload whose tar is larger than the
// limit uncompressed is refused with 413 naming the limit and leaves
// nothing behind; one just under it is stored.
func TestContextUncompressedLimit(t *testing.T) {
	f := &fakeBuilder{}
	h := newTemplateAPI(t, f) // limit 1 MiB
	var req templateView
	call(t, h, "POST", "/v3/templates", `{"name":"ctx"}`, nil, &req)
	fileURL := "/templates/ctx/files/" + testHash
	upload := func(body string) (int, errorBody) {
		var link fileLinkView
		if code := call(t, h, "GET", fileURL, "", nil, &link); code != 201 || link.Present {
			t.Fatalf("file link: %d %+v", code, link)
		}
		var e errorBody
		return call(t, h, "PUT", fileURL, body, link.Headers, &e), e
	}

	bomb := tarGzOfSize(t, 64<<20)
	if len(bomb) > 1<<20/8 {
		t.Fatalf("the bomb is %d bytes compressed: not a bomb", len(bomb))
	}
	code, e := upload(bomb)
	want := "build context: more than 1048576 bytes uncompressed, the limit of this server (serve --max-build-context)"
	if code != 413 || e.Code != 413 || e.Message != want {
		t.Errorf("gzip bomb of %d bytes: %d %+v, want 413 %q", len(bomb), code, e, want)
	}
	if left, _ := os.ReadDir(f.dir); len(left) != 0 {
		t.Errorf("a refused upload left %d files: %v", len(left), left)
	}
	// The positive control: just under the limit (tar headers included).
	if code, e := upload(tarGzOfSize(t, 1<<20-4096)); code != 200 {
		t.Fatalf("context under the limit: %d %+v", code, e)
	}
	var link fileLinkView
	if code := call(t, h, "GET", fileURL, "", nil, &link); code != 201 || !link.Present {
		t.Errorf("after the upload: %d %+v", code, link)
	}
}

func TestContextCollection(t *testing.T) {
	dir := t.TempDir()
	archive := func(h string) string { return filepath.Join(dir, h+".tar") }
	now := time.Now()
	c := &contexts{archive: archive, retention: time.Hour, now: func() time.Time { return now }, held: map[string]int{}}
	hash := func(d byte) string { return strings.Repeat(string(d), 64) }
	old, fresh, held := hash('1'), hash('2'), hash('3')
	files := map[string]time.Time{
		old + ".tar":   now.Add(-2 * time.Hour),
		fresh + ".tar": now.Add(-time.Minute),
		held + ".tar":  now.Add(-2 * time.Hour),
		".upload-123":  now.Add(-2 * time.Hour), // an upload a crash left
		".upload-456":  now,                     // an upload in progress
		"notes.txt":    now.Add(-2 * time.Hour), // not a context
		"abc.tar":      now.Add(-2 * time.Hour), // not a files hash
	}
	for name, mtime := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	spec := template.Spec{Instructions: []template.Instruction{{Op: template.OpCopy, FilesHash: held}}}
	c.hold(spec)

	present := func() []string {
		var names []string
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}
	sweep := func(wantRemoved int, want ...string) {
		t.Helper()
		n, err := c.sweep()
		if err != nil || n != wantRemoved {
			t.Errorf("sweep = %d, %v; want %d removed", n, err, wantRemoved)
		}
		slices.Sort(want)
		if got := present(); !slices.Equal(got, want) {
			t.Errorf("left %q, want %q", got, want)
		}
	}
	// The old unheld context and the crashed upload go; the rest stays.
	sweep(2, fresh+".tar", held+".tar", ".upload-456", "notes.txt", "abc.tar")

	// The build ends: its context counts as used now, and stays.
	c.release(spec)
	sweep(0, fresh+".tar", held+".tar", ".upload-456", "notes.txt", "abc.tar")

	// An answer "present" is a use too.
	now = now.Add(59 * time.Minute)
	if err := c.use(fresh); err != nil {
		t.Fatal(err)
	}
	now = now.Add(30 * time.Minute)
	sweep(2, fresh+".tar", "notes.txt", "abc.tar")
	if err := c.use(old); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("use of a collected context = %v, want fs.ErrNotExist", err)
	}
}
