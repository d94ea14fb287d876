package files

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"log/slog"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/envd/identity"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/state"
)

// dirMark in a fuzzed body or path stands for the target directory.
const dirMark = "@DIR@"

// FuzzUploadMultipart drives POST /files with fuzzed multipart bodies,
// boundaries and path parameters into a temporary target directory: no
// panic; the answer is 200 with the written files, or a 4xx JSON error;
// nothing is written outside the target directory (checked in the target's
// parent after each input); after a 200 the files in it are exactly the
// ones reported. (A name that is not valid UTF-8 is reported with U+FFFD in
// its place, as JSON carries it: testdata 007e711fb711ae33.)
//
// Uploads may name any path (the sandbox user owns the sandbox), and the
// fuzzer runs as root on a real filesystem, so an input is skipped unless
// every destination the multipart reader yields, parsed here the same way
// as the handler does, resolves inside the target directory. A handler
// that parsed differently from what it is given would still be caught by
// the check of the parent.
func FuzzUploadMultipart(f *testing.F) {
	seed := func(boundary, path string, parts ...string) {
		var b bytes.Buffer
		for _, p := range parts {
			b.WriteString("--" + boundary + "\r\n" + p + "\r\n")
		}
		b.WriteString("--" + boundary + "--\r\n")
		f.Add(boundary, b.Bytes(), path)
	}
	file := func(name, content string) string {
		return `Content-Disposition: form-data; name="file"; filename="` + name + "\"\r\nContent-Type: application/octet-stream\r\n\r\n" + content
	}
	seed("b0undary", dirMark+"/a.txt", file("a.txt", "single with path"))
	seed("b0undary", "", file(dirMark+"/x/1.txt", "one"), file(dirMark+"/y/z/2.txt", "two"))
	seed("b0undary", "", file(dirMark+"/same", "1"), file(dirMark+"/same", "2"))
	seed("b0undary", "", file(dirMark+"/f", "a file"), file(dirMark+"/f/g", "under a file"))
	seed("b0undary", "", file(dirMark+"/f", "a file"), file(dirMark+"/f/g/h", "deeper under a file"))
	seed("b0undary", "", file(dirMark+"/d/e", "1"), file(dirMark+"/d", "onto a directory"))
	seed("b0undary", "", file(dirMark+"/../escape", "resolves outside: skipped"))
	seed("b0undary", "", file(dirMark+"/a\x00b", "NUL in the name"))
	seed("b0undary", "", file(dirMark+"/"+strings.Repeat("n", 300), "name too long"))
	seed("b0undary", "", file("", "no filename"))
	seed("b0undary", "", `Content-Disposition: form-data; name="other"`+"\r\n\r\nfield", file(dirMark+"/after-field", "x"))
	seed("b0undary", "", `Content-Disposition: form-data; name="notfile"; filename="`+dirMark+`/ignored"`+"\r\n\r\nx")
	seed("b0undary", "", `Content-Disposition: form-data; name=file; filename*=UTF-8''`+url.PathEscape(dirMark+"/ü.txt")+"\r\n\r\nrfc2231")
	seed("b0undary", "", "Content-Disposition: garbage\r\n\r\nx")
	seed(`"quoted boundary"`, "", file(dirMark+"/q", "x"))
	seed("", "", file(dirMark+"/no-boundary", "x"))
	seed(strings.Repeat("b", 71), "", file(dirMark+"/long-boundary", "x"))
	f.Add("b0undary", []byte("--b0undary\r\n"+file(dirMark+"/unterminated", "no closing boundary")), "")
	f.Add("b0undary", []byte("not multipart at all"), "")
	f.Add("b0undary", []byte{}, dirMark+"/empty")

	me, err := user.Current()
	if err != nil {
		f.Fatal(err)
	}
	u, err := identity.Lookup(me.Username)
	if err != nil {
		f.Fatal(err)
	}
	h := NewHandler(state.New(state.Defaults{User: me.Username}), slog.New(slog.DiscardHandler))

	f.Fuzz(func(t *testing.T, boundary string, body []byte, path string) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "target")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		body = bytes.ReplaceAll(body, []byte(dirMark), []byte(dir))
		path = strings.ReplaceAll(path, dirMark, dir)
		ct := "multipart/form-data; boundary=" + boundary
		if !destsInside(ct, body, path, u, dir) {
			// Not a CI requirement: an input outside the target's
			// domain, as fuzzing generates.
			t.Skip("a destination outside the target directory")
		}

		r := httptest.NewRequest("POST", "/files?"+url.Values{"path": {path}}.Encode(), bytes.NewReader(body))
		r.Header.Set("Content-Type", ct)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)

		// Files in the response are named as JSON can carry them: invalid
		// UTF-8 comes back as U+FFFD, so paths are compared in that form.
		var reported []entry
		switch {
		case w.Code == http.StatusOK:
			if err := json.Unmarshal(w.Body.Bytes(), &reported); err != nil || len(reported) == 0 {
				t.Fatalf("200 with %q: %v", w.Body, err)
			}
		case w.Code >= 400 && w.Code < 500:
			var e errorBody
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Code != w.Code || e.Message == "" {
				t.Fatalf("status %d with body %q, want {code, message}", w.Code, w.Body)
			}
		default:
			t.Fatalf("status %d, want 200 or 4xx; body %s", w.Code, w.Body)
		}

		written := map[string]int{} // by name as JSON carries it
		err := filepath.WalkDir(parent, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p == parent || p == dir {
				return nil
			}
			if !strings.HasPrefix(p, dir+string(filepath.Separator)) {
				t.Errorf("%s written outside the target directory", p)
			}
			if d.Type().IsRegular() {
				written[asJSON(p)]++
			}
			if !d.IsDir() && !d.Type().IsRegular() {
				t.Errorf("%s is neither a file nor a directory (%v)", p, d.Type())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if w.Code == http.StatusOK {
			for _, e := range reported {
				if written[e.Path] == 0 {
					t.Errorf("reported %q, which is not a file in the target directory", e.Path)
				}
				written[e.Path]--
			}
			for p, n := range written {
				if n > 0 {
					t.Errorf("%q written but not reported", p)
				}
			}
		}
	})
}

// asJSON is s as it comes back from a JSON string.
func asJSON(s string) string {
	b, _ := json.Marshal(s)
	var out string
	_ = json.Unmarshal(b, &out)
	return out
}

// destsInside parses body as the handler does and reports whether every
// destination of a "file" part (or the path parameter) resolves inside
// dir.
func destsInside(ct string, body []byte, path string, u *identity.User, dir string) bool {
	inside := func(p string) bool {
		dest, err := identity.ResolvePath(p, u, "")
		return err != nil || strings.HasPrefix(dest, dir+string(filepath.Separator))
	}
	if path != "" {
		return inside(path)
	}
	mediaType, params, err := mime.ParseMediaType(ct)
	if err != nil || mediaType != "multipart/form-data" || params["boundary"] == "" {
		return true // nothing is written
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for {
		part, err := mr.NextPart()
		if err != nil {
			return true
		}
		if part.FormName() != "file" {
			continue
		}
		if name := rawFilename(part); name != "" && !inside(name) {
			return false
		}
	}
}

// TestBadPath4xx: a destination under a regular file, with a name too long
// for the filesystem or with a NUL byte, is the client's mistake (400), not
// a server error; FuzzUploadMultipart found each answered with 500. A
// download of a path under a regular file names nothing: 404.
func TestBadPath4xx(t *testing.T) {
	dir := t.TempDir()
	h := newHandler(t, "")
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{
		filepath.Join(dir, "f", "g"),      // open: ENOTDIR
		filepath.Join(dir, "f", "g", "h"), // parent directories: ENOTDIR
		filepath.Join(dir, strings.Repeat("n", 300)),
		filepath.Join(dir, strings.Repeat("n", 300), "x"),
		filepath.Join(dir, "nul\x00"), // stat: EINVAL
	} {
		w := serve(h, "POST", query("path", path), octet(), strings.NewReader("body"))
		var e errorBody
		if w.Code != http.StatusBadRequest || json.Unmarshal(w.Body.Bytes(), &e) != nil || e.Code != 400 {
			t.Errorf("upload to %q: %d %s, want 400 JSON", path, w.Code, w.Body)
		}
	}
	for path, want := range map[string]int{
		filepath.Join(dir, "f\x00"):                  http.StatusBadRequest,
		filepath.Join(dir, strings.Repeat("n", 300)): http.StatusBadRequest,
		filepath.Join(dir, "f", "g"):                 http.StatusNotFound, // names nothing
	} {
		w := serve(h, "GET", query("path", path), nil, nil)
		var e errorBody
		if w.Code != want || json.Unmarshal(w.Body.Bytes(), &e) != nil || e.Code != want {
			t.Errorf("download of %q: %d %s, want %d JSON", path, w.Code, w.Body, want)
		}
	}
}
