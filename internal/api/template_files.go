package api

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// A COPY step's files reach the server before the build: the SDK asks
// GET /templates/{id}/files/{hash} whether the context with that hash is
// present and, if not, PUTs a tar (gzipped by default) to the URL it is
// given. The URL is this server's own PUT route; the headers carry a
// one-time token bound to the template and hash, so the upload needs no
// API key. The SDK's hash covers "COPY src dest" and the files' paths,
// modes, sizes and contents, not the archive's bytes, so the server cannot
// recompute it from the upload: it checks that the token was issued for
// this hash, that the body is a well-formed archive within the size limit
// and of the announced length, and never replaces a context it has.

// Upload limits.
const (
	uploadTokenTTL    = time.Hour
	maxPendingUploads = 1024
	uploadTimeout     = 10 * time.Minute
	// uploadTokenHeader carries the token; a header rather than a query
	// parameter keeps it out of access logs.
	uploadTokenHeader = "X-Upload-Token"
)

// pendingUpload is an upload link given out and not yet used.
type pendingUpload struct {
	template, hash string
	expires        time.Time
}

// fileLinkView is TemplateBuildFileUpload.
type fileLinkView struct {
	Present bool              `json:"present"`
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

// templateFileLink implements GET /templates/{templateID}/files/{hash}.
func (h *Handler) templateFileLink(w http.ResponseWriter, r *http.Request) {
	name, ok := h.knownTemplate(w, r)
	if !ok {
		return
	}
	hash := r.PathValue("hash")
	if !template.ValidFilesHash(hash) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("files hash %q: want 64 lower-case hex digits (a SHA-256)", hash))
		return
	}
	if err := h.templates.contexts.use(hash); err == nil {
		writeJSON(w, http.StatusCreated, fileLinkView{Present: true})
		return
	} else if !errors.Is(err, fs.ErrNotExist) {
		h.templateFail(w, r, err)
		return
	}
	token, ok := h.templates.issueUpload(name, hash)
	if !ok {
		w.Header().Set("Retry-After", "60")
		writeError(w, http.StatusTooManyRequests, fmt.Sprintf("%d uploads are pending; retry later", maxPendingUploads))
		return
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	writeJSON(w, http.StatusCreated, fileLinkView{
		URL:     scheme + "://" + r.Host + "/templates/" + name + "/files/" + hash,
		Headers: map[string]string{uploadTokenHeader: token},
	})
}

// issueUpload records a new upload token for template's context hash;
// ok is false when too many are pending.
func (t *TemplateBuilds) issueUpload(template, hash string) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	for tok, u := range t.uploads {
		if now.After(u.expires) {
			delete(t.uploads, tok)
		}
	}
	if len(t.uploads) >= maxPendingUploads {
		return "", false
	}
	b := make([]byte, 32)
	rand.Read(b)
	tok := hex.EncodeToString(b)
	t.uploads[tok] = pendingUpload{template: template, hash: hash, expires: now.Add(uploadTokenTTL)}
	return tok, true
}

// takeUpload consumes token if it was issued for template and hash and is
// still valid.
func (t *TemplateBuilds) takeUpload(token, template, hash string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	u, ok := t.uploads[token]
	if !ok || u.template != template || u.hash != hash || t.now().After(u.expires) {
		return false
	}
	delete(t.uploads, token)
	return true
}

// uploadTemplateFile implements the PUT the file link points at.
func (h *Handler) uploadTemplateFile(w http.ResponseWriter, r *http.Request) {
	name, hash := r.PathValue("templateID"), r.PathValue("hash")
	if !template.ValidFilesHash(hash) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("files hash %q: want 64 lower-case hex digits (a SHA-256)", hash))
		return
	}
	if !h.templates.takeUpload(r.Header.Get(uploadTokenHeader), name, hash) {
		writeError(w, http.StatusForbidden, "upload token missing, unknown or expired: ask GET /templates/{templateID}/files/{hash} for a new link")
		return
	}
	if r.ContentLength < 0 {
		writeError(w, http.StatusLengthRequired, "Content-Length is required")
		return
	}
	limit := h.templates.maxContext
	if r.ContentLength > limit {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("build context of %d bytes is larger than the limit of %d bytes", r.ContentLength, limit))
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(uploadTimeout))
	err := h.templates.storeContext(hash, r.Body, r.ContentLength)
	var bad *badArchiveError
	var large *contextTooLargeError
	switch {
	case errors.As(err, &large):
		writeError(w, http.StatusRequestEntityTooLarge, large.Error())
	case errors.As(err, &bad):
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusBadRequest, bad.Error())
	case errors.Is(err, os.ErrDeadlineExceeded):
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusRequestTimeout, fmt.Sprintf("build context not received within %s", uploadTimeout))
	case err != nil:
		h.templateFail(w, r, err)
	default:
		w.WriteHeader(http.StatusOK)
	}
}

// badArchiveError is an upload that is not an acceptable build context.
type badArchiveError struct{ msg string }

func (e *badArchiveError) Error() string { return "build context: " + e.msg }

// contextTooLargeError is an upload whose tar is larger, uncompressed,
// than the limit: a gzip bomb, or just too much.
type contextTooLargeError struct{ limit int64 }

func (e *contextTooLargeError) Error() string {
	return fmt.Sprintf("build context: more than %d bytes uncompressed, the limit of this server (serve --max-build-context)", e.limit)
}

// storeContext stores an uploaded archive of exactly size bytes as the
// context of hash, after checking that it is a well-formed tar (gzipped
// or not) with relative entry names and within the size limit
// uncompressed. A context already stored is kept, and counts as used:
// the first upload of a hash wins. Nothing is left behind on bad input.
func (t *TemplateBuilds) storeContext(hash string, body io.Reader, size int64) error {
	dst := t.builder.ContextArchive(hash)
	if err := writeContext(dst, body, size, t.maxContext); err != nil {
		return err
	}
	return t.contexts.use(hash)
}

// writeContext writes a checked archive of size bytes to dst unless dst
// exists.
func writeContext(dst string, body io.Reader, size, limit int64) (err error) {
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return fmt.Errorf("creating the build context directory: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(dst), ".upload-*")
	if err != nil {
		return fmt.Errorf("creating the build context file: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	n, err := io.Copy(f, io.LimitReader(body, size+1))
	if err == nil && n != size {
		err = &badArchiveError{fmt.Sprintf("got %d bytes, Content-Length said %d", n, size)}
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := checkArchive(tmp, limit); err != nil {
		return err
	}
	if err := os.Link(tmp, dst); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("storing the build context: %w", err)
	}
	return nil
}

// checkArchive reads the archive at name through to the end, and at
// most limit bytes of its tar (headers included).
func checkArchive(name string, limit int64) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var rd io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return &badArchiveError{"malformed gzip: " + err.Error()}
		}
		defer zr.Close()
		rd = zr
	}
	lr := &io.LimitedReader{R: rd, N: limit + 1}
	tr := tar.NewReader(lr)
	entries := 0
	for {
		hdr, err := tr.Next()
		if lr.N <= 0 {
			return &contextTooLargeError{limit}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return &badArchiveError{"malformed tar: " + err.Error()}
		}
		clean := path.Clean(hdr.Name)
		if strings.HasPrefix(hdr.Name, "/") || clean == ".." || strings.HasPrefix(clean, "../") {
			return &badArchiveError{fmt.Sprintf("entry %q is outside the context", hdr.Name)}
		}
		if _, err := io.Copy(io.Discard, tr); lr.N <= 0 {
			return &contextTooLargeError{limit}
		} else if err != nil {
			return &badArchiveError{"malformed tar: " + err.Error()}
		}
		entries++
	}
	if entries == 0 {
		return &badArchiveError{"the archive is empty"}
	}
	return nil
}
