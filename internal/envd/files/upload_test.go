package files

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agent-sandbox/agent-sandbox/internal/envd/fsmeta"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

type part struct{ field, filename, content string }

// multipartBody encodes parts; a part with a filename is a file part, whose
// filename is sent as given, directories included.
func multipartBody(t *testing.T, parts ...part) (*bytes.Buffer, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		var w io.Writer
		var err error
		if p.filename != "" {
			w, err = mw.CreateFormFile(p.field, p.filename)
		} else {
			w, err = mw.CreateFormField(p.field)
		}
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, p.content)
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf, mw.FormDataContentType()
}

func gzipped(t *testing.T, b []byte) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	gz.Write(b)
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// upload posts body and returns the written entries, failing t unless the
// status is 200.
func upload(t *testing.T, h http.Handler, rawQuery string, hdr http.Header, body io.Reader) []entry {
	t.Helper()
	w := serve(h, "POST", rawQuery, hdr, body)
	if w.Code != 200 {
		t.Fatalf("status = %d, want 200; body %s", w.Code, w.Body)
	}
	var got []entry
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatalf("decoding %q: %v", w.Body, err)
	}
	return got
}

func checkFile(t *testing.T, path, content string, mode fs.FileMode, uid int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != content {
		t.Errorf("%s holds %q, want %q", path, b, content)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != mode {
		t.Errorf("%s mode = %v, want %v", path, fi.Mode(), mode)
	}
	if got := int(fi.Sys().(*syscall.Stat_t).Uid); got != uid {
		t.Errorf("%s uid = %d, want %d", path, got, uid)
	}
}

// withUmask runs the rest of the test with umask m: uploads must not
// depend on envd's umask.
func withUmask(t *testing.T, m int) {
	old := syscall.Umask(m)
	t.Cleanup(func() { syscall.Umask(old) })
}

func octet() http.Header { return http.Header{"Content-Type": {"application/octet-stream"}} }

func TestUploadOctetStream(t *testing.T) {
	withUmask(t, 0o077)
	dir := t.TempDir()
	h := newHandler(t, "")
	path := filepath.Join(dir, "new", "sub", "a.txt")
	got := upload(t, h, query("path", path), octet(), strings.NewReader("hello"))
	want := []entry{{Path: path, Name: "a.txt", Type: "file"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
	checkFile(t, path, "hello", 0o644, os.Geteuid())

	// Overwriting truncates and keeps the mode of the existing file.
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	upload(t, h, query("path", path), octet(), strings.NewReader("hi"))
	checkFile(t, path, "hi", 0o600, os.Geteuid())

	// gzip'ed body.
	hdr := octet()
	hdr.Set("Content-Encoding", "gzip")
	upload(t, h, query("path", path), hdr, gzipped(t, []byte("unzipped")))
	checkFile(t, path, "unzipped", 0o600, os.Geteuid())
}

func TestUploadMultipart(t *testing.T) {
	withUmask(t, 0)
	dir := t.TempDir()
	h := newHandler(t, "")
	me := os.Geteuid()

	t.Run("single with path", func(t *testing.T) {
		path := filepath.Join(dir, "single.txt")
		body, ct := multipartBody(t, part{"file", "ignored-name.txt", "one"})
		got := upload(t, h, query("path", path), http.Header{"Content-Type": {ct}}, body)
		if diff := cmp.Diff([]entry{{Path: path, Name: "single.txt", Type: "file"}}, got); diff != "" {
			t.Errorf("response (-want +got):\n%s", diff)
		}
		checkFile(t, path, "one", 0o644, me)
	})

	t.Run("full-path filenames", func(t *testing.T) {
		p1 := filepath.Join(dir, "multi", "x", "1.txt")
		p2 := filepath.Join(dir, "multi", "y", "z", "2.txt")
		body, ct := multipartBody(t,
			part{"file", p1, "first"},
			part{"other", "", "a form field, ignored"},
			part{"notfile", filepath.Join(dir, "ignored.txt"), "a file part under another name, ignored"},
			part{"file", p2, "second"},
		)
		got := upload(t, h, "", http.Header{"Content-Type": {ct}}, body)
		want := []entry{{Path: p1, Name: "1.txt", Type: "file"}, {Path: p2, Name: "2.txt", Type: "file"}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("response (-want +got):\n%s", diff)
		}
		checkFile(t, p1, "first", 0o644, me)
		checkFile(t, p2, "second", 0o644, me)
		if _, err := os.Stat(filepath.Join(dir, "ignored.txt")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a part not named file was written (stat err %v)", err)
		}
	})

	t.Run("gzip", func(t *testing.T) {
		path := filepath.Join(dir, "gz.txt")
		body, ct := multipartBody(t, part{"file", path, "compressed"})
		hdr := http.Header{"Content-Type": {ct}, "Content-Encoding": {"gzip"}}
		upload(t, h, "", hdr, gzipped(t, body.Bytes()))
		checkFile(t, path, "compressed", 0o644, me)
	})
}

func TestUploadErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	writeTestFile(t, file, "x")
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	mp := func(parts ...part) (http.Header, io.Reader) {
		body, ct := multipartBody(t, parts...)
		return http.Header{"Content-Type": {ct}}, body
	}
	dup := filepath.Join(dir, "dup.txt")

	tests := []struct {
		name    string
		query   string
		req     func() (http.Header, io.Reader)
		status  int
		message string
		absent  string // a path that must not have been written
	}{
		{name: "octet-stream without path", req: func() (http.Header, io.Reader) { return octet(), strings.NewReader("x") },
			status: 400, message: "missing path query parameter: an application/octet-stream upload needs one"},
		{name: "directory target", query: query("path", dir),
			req:    func() (http.Header, io.Reader) { return octet(), strings.NewReader("x") },
			status: 400, message: "path '" + dir + "' is a directory"},
		{name: "fifo target", query: query("path", fifo),
			req:    func() (http.Header, io.Reader) { return octet(), strings.NewReader("x") },
			status: 400, message: "path '" + fifo + "' is not a regular file"},
		{name: "parent is a file", query: query("path", file+"/a.txt"),
			req:    func() (http.Header, io.Reader) { return octet(), strings.NewReader("x") },
			status: 400, message: "path '" + file + "' exists and is not a directory: file already exists"},
		{name: "multipart directory target",
			req:    func() (http.Header, io.Reader) { return mp(part{"file", dir + "/", "x"}) },
			status: 400, message: "path '" + dir + "' is a directory"},
		{name: "duplicate filenames",
			req: func() (http.Header, io.Reader) {
				return mp(part{"file", dup, "1"}, part{"file", dir + "/./dup.txt", "2"})
			},
			status: 400, message: "cannot upload multiple files to the same path '" + dup + "'"},
		{name: "two files to one path query", query: query("path", filepath.Join(dir, "q.txt")),
			req:    func() (http.Header, io.Reader) { return mp(part{"file", "a", "1"}, part{"file", "b", "2"}) },
			status: 400, message: "cannot upload multiple files to the same path '" + filepath.Join(dir, "q.txt") + "'"},
		{name: "no file part",
			req:    func() (http.Header, io.Reader) { return mp(part{"other", "", "x"}) },
			status: 400, message: "no part named 'file' in the multipart body"},
		{name: "file part without filename or path",
			req: func() (http.Header, io.Reader) {
				body := "--b\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nx\r\n--b--\r\n"
				return http.Header{"Content-Type": {"multipart/form-data; boundary=b"}}, strings.NewReader(body)
			},
			status: 400, message: "missing path: no path query parameter and no filename in the file part"},
		{name: "no boundary", req: func() (http.Header, io.Reader) {
			return http.Header{"Content-Type": {"multipart/form-data"}}, strings.NewReader("")
		}, status: 400, message: "multipart/form-data without a boundary"},
		{name: "truncated multipart", absent: filepath.Join(dir, "trunc.txt"), req: func() (http.Header, io.Reader) {
			body := "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"" + filepath.Join(dir, "trunc.txt") + "\"\r\n\r\nx"
			return http.Header{"Content-Type": {"multipart/form-data; boundary=b"}}, strings.NewReader(body)
		}, status: 400, message: "reading the body of '" + filepath.Join(dir, "trunc.txt") + "': unexpected EOF"},
		{name: "not gzip", query: query("path", filepath.Join(dir, "g.txt")), req: func() (http.Header, io.Reader) {
			hdr := octet()
			hdr.Set("Content-Encoding", "gzip")
			return hdr, strings.NewReader("plain text")
		}, status: 400, message: "decompressing request body: gzip: invalid header"},
		{name: "corrupt gzip", query: query("path", filepath.Join(dir, "c.txt")), absent: filepath.Join(dir, "c.txt"),
			req: func() (http.Header, io.Reader) {
				hdr := octet()
				hdr.Set("Content-Encoding", "gzip")
				b := gzipped(t, []byte("some text")).Bytes()
				b[len(b)-5] ^= 0xff // break the CRC
				return hdr, bytes.NewReader(b)
			}, status: 400, message: "reading the body of '" + filepath.Join(dir, "c.txt") + "': gzip: invalid checksum"},
		{name: "unsupported encoding", query: query("path", filepath.Join(dir, "br.txt")), req: func() (http.Header, io.Reader) {
			hdr := octet()
			hdr.Set("Content-Encoding", "br")
			return hdr, strings.NewReader("x")
		}, status: 415, message: "unsupported Content-Encoding 'br': want gzip or none"},
		{name: "unsupported type", query: query("path", filepath.Join(dir, "j.txt")), req: func() (http.Header, io.Reader) {
			return http.Header{"Content-Type": {"application/json"}}, strings.NewReader("{}")
		}, status: 415, message: "unsupported Content-Type 'application/json': want multipart/form-data or application/octet-stream"},
		{name: "no type", query: query("path", filepath.Join(dir, "n.txt")), req: func() (http.Header, io.Reader) {
			return http.Header{}, strings.NewReader("x")
		}, status: 415, message: "unsupported Content-Type '': want multipart/form-data or application/octet-stream"},
		{name: "non-ASCII metadata", query: query("path", filepath.Join(dir, "m.txt")), absent: filepath.Join(dir, "m.txt"),
			req: func() (http.Header, io.Reader) {
				hdr := octet()
				hdr.Set("X-Metadata-Owner", "jos\u00e9")
				return hdr, strings.NewReader("x")
			}, status: 400, message: `invalid metadata: key "owner": keys and values must be printable ASCII`},
		{name: "metadata key too long", query: query("path", filepath.Join(dir, "k.txt")), absent: filepath.Join(dir, "k.txt"),
			req: func() (http.Header, io.Reader) {
				hdr := octet()
				hdr.Set("X-Metadata-"+strings.Repeat("k", fsmeta.MaxKeyLen+1), "v")
				return hdr, strings.NewReader("x")
			}, status: 400, message: `invalid metadata: key "` + strings.Repeat("k", fsmeta.MaxKeyLen+1) + `" is longer than 246 bytes`},
		{name: "metadata too large", query: query("path", filepath.Join(dir, "l.txt")), absent: filepath.Join(dir, "l.txt"),
			req: func() (http.Header, io.Reader) {
				hdr := octet()
				hdr.Set("X-Metadata-A", strings.Repeat("v", 3000))
				hdr.Set("X-Metadata-B", strings.Repeat("v", 3000))
				return hdr, strings.NewReader("x")
			}, status: 400, message: "invalid metadata: 6002 bytes in total, more than 4096"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr, body := tt.req()
			checkError(t, serve(newHandler(t, ""), "POST", tt.query, hdr, body), tt.status, tt.message)
			if tt.absent != "" {
				if _, err := os.Stat(tt.absent); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("%s was left behind (stat err %v)", tt.absent, err)
				}
			}
		})
	}
}

func TestUploadMetadata(t *testing.T) {
	dir := t.TempDir()
	h := newHandler(t, "")
	path := filepath.Join(dir, "meta.txt")
	err := fsmeta.Replace(dir, map[string]string{"probe": "x"})
	testenv.Require(t, err == nil, fmt.Sprintf("test needs user xattrs on %s (t.TempDir; set TMPDIR): %v", dir, err))

	hdr := octet()
	hdr.Set("X-Metadata-Owner", "alice")
	hdr["x-metadata-Project-ID"] = []string{"p-1", "second value ignored"}
	got := upload(t, h, query("path", path), hdr, strings.NewReader("v1"))
	md := map[string]string{"owner": "alice", "project-id": "p-1"}
	if diff := cmp.Diff([]entry{{Path: path, Name: "meta.txt", Type: "file", Metadata: md}}, got); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
	if stored, err := fsmeta.Read(path); err != nil || !cmp.Equal(stored, md) {
		t.Errorf("stored metadata = %v, %v; want %v", stored, err, md)
	}

	// The same metadata goes on every file of a multi-file upload, replacing
	// what was there.
	other := filepath.Join(dir, "other.txt")
	body, ct := multipartBody(t, part{"file", path, "v2"}, part{"file", other, "o"})
	hdr = http.Header{"Content-Type": {ct}, "X-Metadata-Owner": {"bob"}}
	got = upload(t, h, "", hdr, body)
	md = map[string]string{"owner": "bob"}
	want := []entry{{Path: path, Name: "meta.txt", Type: "file", Metadata: md}, {Path: other, Name: "other.txt", Type: "file", Metadata: md}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
	for _, p := range []string{path, other} {
		if stored, err := fsmeta.Read(p); err != nil || !cmp.Equal(stored, md) {
			t.Errorf("stored metadata of %s = %v, %v; want %v", p, stored, err, md)
		}
	}

	// An upload without metadata clears it, and the response has none.
	w := serve(h, "POST", query("path", path), octet(), strings.NewReader("v3"))
	if w.Code != 200 || strings.Contains(w.Body.String(), "metadata") {
		t.Errorf("upload without metadata = %d %s, want 200 without a metadata key", w.Code, w.Body)
	}
	if stored, err := fsmeta.Read(path); err != nil || len(stored) != 0 {
		t.Errorf("stored metadata after a plain upload = %v, %v; want none", stored, err)
	}
}

func TestUploadOwnership(t *testing.T) {
	testenv.RequireRoot(t)
	// (*identity.User).MkdirAll's 0755 is subject to the umask; envd runs
	// with the usual 022.
	withUmask(t, 0o022)
	uid, gid := nobodyIDs(t)
	dir := sharedDir(t)
	mustDo(t, os.Chmod(dir, 0o777)) // root's, but open to nobody
	h := newHandler(t, "")
	path := filepath.Join(dir, "a", "b", "c.txt")
	body, ct := multipartBody(t, part{"file", path, "owned"})
	upload(t, h, query("username", "nobody"), http.Header{"Content-Type": {ct}}, body)
	checkFile(t, path, "owned", 0o644, uid)
	for _, d := range []string{filepath.Join(dir, "a"), filepath.Join(dir, "a", "b"), path} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if int(st.Uid) != uid || int(st.Gid) != gid {
			t.Errorf("%s owned by %d:%d, want nobody (%d:%d)", d, st.Uid, st.Gid, uid, gid)
		}
		if fi.IsDir() && fi.Mode().Perm() != 0o755 {
			t.Errorf("%s mode = %v, want 0755", d, fi.Mode())
		}
	}
	// The directory written into existed before: it keeps its owner.
	if fi, _ := os.Stat(dir); int(fi.Sys().(*syscall.Stat_t).Uid) != 0 {
		t.Errorf("existing parent %s changed owner", dir)
	}
}

// TestFilesAsUser: reads and writes have the requesting user's
// permissions, also through symlinks that sandbox code planted; root's
// requests, the positive control, do what nobody's may not.
func TestFilesAsUser(t *testing.T) {
	testenv.RequireRoot(t)
	uid, gid := nobodyIDs(t)
	root := sharedDir(t) // root's 0755, like /etc
	home := filepath.Join(root, "home")
	mustDo(t, os.Mkdir(home, 0o755))
	mustDo(t, os.Chown(home, uid, gid))
	secret := filepath.Join(root, "secret")
	mustDo(t, os.WriteFile(secret, []byte("root only"), 0o600))
	for _, f := range []string{filepath.Join(root, "profile.sh"), filepath.Join(home, "left-by-root")} {
		mustDo(t, os.WriteFile(f, []byte("root's"), 0o644))
	}
	mustDo(t, os.Symlink(filepath.Join(root, "profile.sh"), filepath.Join(home, "to-root")))
	mustDo(t, os.Symlink(secret, filepath.Join(home, "to-secret")))
	h := newHandler(t, "")

	for _, c := range []struct {
		user, path string
		status     int
		body       string
	}{
		{"nobody", secret, 403, ""},
		{"nobody", filepath.Join(home, "to-secret"), 403, ""},
		{"nobody", filepath.Join(root, "profile.sh"), 200, "root's"}, // world-readable
		{"root", secret, 200, "root only"},
		{"root", filepath.Join(home, "to-secret"), 200, "root only"},
	} {
		w := serve(h, "GET", query("path", c.path, "username", c.user), nil, nil)
		if w.Code != c.status || (c.body != "" && w.Body.String() != c.body) {
			t.Errorf("GET %s as %s: %d %q, want %d %q", c.path, c.user, w.Code, w.Body, c.status, c.body)
		}
	}

	for _, c := range []struct {
		user, path, target string
		status, owner      int
	}{
		{"nobody", filepath.Join(root, "new"), filepath.Join(root, "new"), 403, -1},
		{"nobody", filepath.Join(root, "sub", "new"), filepath.Join(root, "sub"), 403, -1},
		{"nobody", filepath.Join(home, "to-root"), filepath.Join(root, "profile.sh"), 403, 0},
		{"nobody", filepath.Join(home, "left-by-root"), filepath.Join(home, "left-by-root"), 403, 0},
		{"nobody", filepath.Join(home, "new"), filepath.Join(home, "new"), 200, uid},
		{"root", filepath.Join(root, "new"), filepath.Join(root, "new"), 200, 0},
		// An existing file keeps its owner, whoever writes it.
		{"root", filepath.Join(home, "new"), filepath.Join(home, "new"), 200, uid},
	} {
		w := serve(h, "POST", query("path", c.path, "username", c.user), octet(), strings.NewReader("written by "+c.user))
		if w.Code != c.status {
			t.Errorf("POST %s as %s: %d %s, want %d", c.path, c.user, w.Code, w.Body, c.status)
			continue
		}
		fi, err := os.Stat(c.target)
		switch {
		case c.owner < 0 && err == nil:
			t.Errorf("POST %s as %s created %s", c.path, c.user, c.target)
		case c.owner >= 0 && err != nil:
			t.Errorf("after POST %s as %s: %v", c.path, c.user, err)
		case c.owner >= 0 && int(fi.Sys().(*syscall.Stat_t).Uid) != c.owner:
			t.Errorf("after POST %s as %s, %s belongs to %d, want %d", c.path, c.user, c.target, fi.Sys().(*syscall.Stat_t).Uid, c.owner)
		}
		if b, _ := os.ReadFile(c.target); c.status == 403 && strings.Contains(string(b), "written by") {
			t.Errorf("POST %s as %s was refused but wrote %s", c.path, c.user, c.target)
		}
	}
}

// nobodyIDs is the uid and gid of the user nobody.
func nobodyIDs(t *testing.T) (uid, gid int) {
	t.Helper()
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Fatalf("looking up nobody: %v", err)
	}
	uid, _ = strconv.Atoi(nobody.Uid)
	gid, _ = strconv.Atoi(nobody.Gid)
	return uid, gid
}

// sharedDir is an empty directory of root's, mode 0755, on a path every
// user may walk (t.TempDir's parent is root's alone).
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "envd-files-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	mustDo(t, os.Chmod(dir, 0o755))
	return dir
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// pattern is an endless stream of bytes that takes no memory.
type pattern struct{}

func (pattern) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(i)
	}
	return len(p), nil
}

func TestUploadStreams(t *testing.T) {
	const size = 100 << 20
	const budget = 2 << 20 // far below size: the body is not buffered (~100 KiB in practice)
	if testing.Short() {
		// Not a CI requirement: -short is the developer's opt-out; CI
		// runs without it.
		t.Skip("skipping: writes 200 MB")
	}
	dir := t.TempDir()
	h := newHandler(t, "")

	measure := func(t *testing.T, path string, hdr http.Header, body io.Reader) {
		t.Helper()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		upload(t, h, query("path", path), hdr, body)
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > budget {
			t.Errorf("uploading %d MiB allocated %d MiB", size>>20, alloc>>20)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() != size {
			t.Errorf("%s has %d bytes, want %d", path, fi.Size(), size)
		}
		os.Remove(path)
	}

	t.Run("octet-stream", func(t *testing.T) {
		measure(t, filepath.Join(dir, "raw.bin"), octet(), io.LimitReader(pattern{}, size))
	})
	t.Run("multipart", func(t *testing.T) {
		pr, pw := io.Pipe()
		mw := multipart.NewWriter(pw)
		go func() {
			fw, err := mw.CreateFormFile("file", "big.bin")
			if err == nil {
				_, err = io.Copy(fw, io.LimitReader(pattern{}, size))
			}
			if err == nil {
				err = mw.Close()
			}
			pw.CloseWithError(err)
		}()
		measure(t, filepath.Join(dir, "multi.bin"), http.Header{"Content-Type": {mw.FormDataContentType()}}, pr)
	})
}
