package files

import (
	"compress/gzip"
	"errors"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/agent-sandbox/agent-sandbox/internal/envd/fsmeta"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/httpjson"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/identity"
)

// metadataHeader prefixes the request headers that carry file metadata.
const metadataHeader = "X-Metadata-"

// entry is one written file in the upload response.
type entry struct {
	Path     string            `json:"path"`
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// upload serves POST /files: a multipart form whose "file" parts are files,
// or a raw application/octet-stream body, either optionally gzip'ed. Bodies
// are streamed to disk, never held in memory.
func (h *Handler) upload(w http.ResponseWriter, r *http.Request, u *identity.User) error {
	md, err := metadata(r.Header)
	if err != nil {
		return err
	}
	body := io.Reader(r.Body)
	switch ce := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); ce {
	case "", "identity":
	case "gzip", "x-gzip":
		gz, err := gzip.NewReader(r.Body)
		if err != nil {
			return errorf(http.StatusBadRequest, "decompressing request body: %v", err)
		}
		defer gz.Close()
		body = gz
	default:
		return errorf(http.StatusUnsupportedMediaType, "unsupported Content-Encoding '%s': want gzip or none", ce)
	}

	ct := r.Header.Get("Content-Type")
	mediaType, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return errorf(http.StatusUnsupportedMediaType, "unsupported Content-Type '%s': want multipart/form-data or application/octet-stream", ct)
	}
	var written []entry
	switch mediaType {
	case "multipart/form-data":
		written, err = h.uploadMultipart(body, params["boundary"], r.URL.Query().Get("path"), u, md)
	case "application/octet-stream":
		written, err = h.uploadRaw(body, r.URL.Query().Get("path"), u, md)
	default:
		return errorf(http.StatusUnsupportedMediaType, "unsupported Content-Type '%s': want multipart/form-data or application/octet-stream", ct)
	}
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, written)
	return nil
}

func (h *Handler) uploadRaw(body io.Reader, path string, u *identity.User, md map[string]string) ([]entry, error) {
	if path == "" {
		return nil, errorf(http.StatusBadRequest, "missing path query parameter: an application/octet-stream upload needs one")
	}
	dest, err := h.resolve(path, u)
	if err != nil {
		return nil, err
	}
	e, err := writeFile(dest, body, u, md)
	if err != nil {
		return nil, err
	}
	return []entry{e}, nil
}

// uploadMultipart writes every part named "file" to path or, when path is
// "", to the part's filename taken verbatim, directories included.
func (h *Handler) uploadMultipart(body io.Reader, boundary, path string, u *identity.User, md map[string]string) ([]entry, error) {
	if boundary == "" {
		return nil, errorf(http.StatusBadRequest, "multipart/form-data without a boundary")
	}
	mr := multipart.NewReader(body, boundary)
	var written []entry
	seen := map[string]bool{}
	for {
		part, err := mr.NextPart() // skips what is left of the previous part
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, errorf(http.StatusBadRequest, "reading multipart body: %v", err)
		}
		if part.FormName() != "file" {
			continue
		}
		dest := path
		if dest == "" {
			dest = rawFilename(part)
		}
		if dest == "" {
			return nil, errorf(http.StatusBadRequest, "missing path: no path query parameter and no filename in the file part")
		}
		if dest, err = h.resolve(dest, u); err != nil {
			return nil, err
		}
		if seen[dest] {
			return nil, errorf(http.StatusBadRequest, "cannot upload multiple files to the same path '%s'", dest)
		}
		seen[dest] = true
		e, err := writeFile(dest, part, u, md)
		if err != nil {
			return nil, err
		}
		written = append(written, e)
	}
	if len(written) == 0 {
		return nil, errorf(http.StatusBadRequest, "no part named 'file' in the multipart body")
	}
	return written, nil
}

// rawFilename is the filename parameter of a part's Content-Disposition as
// sent. (*multipart.Part).FileName strips directories, which the SDKs use to
// carry the destination of each file.
func rawFilename(p *multipart.Part) string {
	_, params, err := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
	if err != nil {
		return ""
	}
	return params["filename"]
}

// metadata collects the X-Metadata-<key> headers, keys lower-cased. Only the
// first value of a repeated header counts.
func metadata(hdr http.Header) (map[string]string, error) {
	var md map[string]string
	for k, vs := range hdr {
		if len(k) < len(metadataHeader) || !strings.EqualFold(k[:len(metadataHeader)], metadataHeader) || len(vs) == 0 {
			continue
		}
		if md == nil {
			md = map[string]string{}
		}
		md[strings.ToLower(k[len(metadataHeader):])] = vs[0]
	}
	if err := fsmeta.Validate(md); err != nil {
		return nil, errorf(http.StatusBadRequest, "%v", err)
	}
	return md, nil
}

// writeFile streams src to path as u: missing parents are created (0755,
// owned by u), a new file gets mode 0644, the file is given to u, and its
// metadata is replaced by md.
func writeFile(path string, src io.Reader, u *identity.User, md map[string]string) (entry, error) {
	if err := u.MkdirAll(filepath.Dir(path)); err != nil {
		switch {
		case noSpace(err):
			return entry{}, errorf(http.StatusInsufficientStorage, "not enough disk space to create '%s': %v", filepath.Dir(path), err)
		case errors.Is(err, fs.ErrExist):
			return entry{}, errorf(http.StatusBadRequest, "%v", err)
		case badPath(err):
			return entry{}, errorf(http.StatusBadRequest, "invalid path '%s': %v", path, err)
		}
		return entry{}, errorf(http.StatusInternalServerError, "creating parent directories of '%s': %v", path, err)
	}
	fi, err := os.Stat(path)
	isNew := errors.Is(err, fs.ErrNotExist)
	switch {
	case err != nil && badPath(err):
		return entry{}, errorf(http.StatusBadRequest, "invalid path '%s': %v", path, err)
	case err != nil && !isNew:
		return entry{}, errorf(http.StatusInternalServerError, "checking path '%s': %v", path, err)
	case err == nil && fi.IsDir():
		return entry{}, errorf(http.StatusBadRequest, "path '%s' is a directory", path)
	case err == nil && !fi.Mode().IsRegular():
		return entry{}, errorf(http.StatusBadRequest, "path '%s' is not a regular file", path)
	}

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o666)
	switch {
	case errors.Is(err, syscall.EISDIR):
		return entry{}, errorf(http.StatusBadRequest, "path '%s' is a directory", path)
	case badPath(err):
		return entry{}, errorf(http.StatusBadRequest, "invalid path '%s': %v", path, err)
	case noSpace(err):
		return entry{}, errorf(http.StatusInsufficientStorage, "not enough disk space to create '%s': %v", path, err)
	case err != nil:
		return entry{}, errorf(http.StatusInternalServerError, "opening '%s' for writing: %v", path, err)
	}
	e, err := fill(f, path, isNew, src, u, md)
	if closeErr := f.Close(); err == nil && closeErr != nil {
		err = writeError(path, closeErr)
	}
	if err != nil && isNew {
		_ = os.Remove(path) // do not leave a partial file taking up space
	}
	return e, err
}

func fill(f *os.File, path string, isNew bool, src io.Reader, u *identity.User, md map[string]string) (entry, error) {
	if isNew {
		// 0666 less the usual umask 022, whatever envd's own umask is.
		if err := f.Chmod(0o644); err != nil {
			return entry{}, errorf(http.StatusInternalServerError, "setting the mode of '%s': %v", path, err)
		}
	}
	if mayGive(f, path, u) {
		if err := u.ChownFile(f); err != nil {
			return entry{}, errorf(http.StatusInternalServerError, "%v", err)
		}
	}
	rs := &readSide{r: src}
	if _, err := io.Copy(f, rs); err != nil {
		if rs.err != nil {
			return entry{}, errorf(http.StatusBadRequest, "reading the body of '%s': %v", path, rs.err)
		}
		return entry{}, writeError(path, err)
	}
	if err := fsmeta.Replace(path, md); err != nil {
		if errors.Is(err, errors.ErrUnsupported) && len(md) == 0 {
			// No metadata on this platform, and none asked for.
			return entry{Path: path, Name: filepath.Base(path), Type: "file"}, nil
		}
		if errors.Is(err, fsmeta.ErrInvalid) {
			return entry{}, errorf(http.StatusBadRequest, "%v", err)
		}
		return entry{}, errorf(http.StatusInternalServerError, "storing metadata of '%s': %v", path, err)
	}
	return entry{Path: path, Name: filepath.Base(path), Type: "file", Metadata: md}, nil
}

func writeError(path string, err error) error {
	if noSpace(err) {
		return errorf(http.StatusInsufficientStorage, "not enough disk space to write '%s': %v", path, err)
	}
	return errorf(http.StatusInternalServerError, "writing '%s': %v", path, err)
}

// mayGive reports whether the written file f may be given to u, as envd
// gives every file it writes. Not when path reached f through a symlink
// into a directory u does not own: sandbox code that planted the link
// would otherwise get, through an innocent write by the caller, ownership
// of a file it could not touch (a root-owned /etc/profile.d script, say).
// The check runs after the open and compares inodes, so a link swapped in
// between cannot redirect it; hard links to others' files are refused by
// the kernel (fs.protected_hardlinks).
func mayGive(f *os.File, path string, u *identity.User) bool {
	opened, err := f.Stat()
	if err != nil {
		return false
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return false
	}
	now, err := os.Stat(real)
	if err != nil || !os.SameFile(opened, now) {
		return false
	}
	if real == filepath.Clean(path) {
		return true
	}
	dir, err := os.Stat(filepath.Dir(real))
	if err != nil {
		return false
	}
	st, ok := dir.Sys().(*syscall.Stat_t)
	return ok && st.Uid == u.UID
}

// badPath reports whether err says the client's path cannot name a file: a
// component under a regular file, or a name too long.
func badPath(err error) bool {
	return errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ENAMETOOLONG)
}

func noSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// readSide remembers the error of the reader io.Copy drains, so that a bad
// request body is told apart from a failing disk.
type readSide struct {
	r   io.Reader
	err error
}

func (s *readSide) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		s.err = err
	}
	return n, err
}
