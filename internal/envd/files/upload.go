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

// writeFile streams src to path as u, with u's permissions: missing
// parents are created (0755) and a new file gets mode 0644, both belonging
// to u; an existing file keeps its owner. Its metadata is replaced by md.
func writeFile(path string, src io.Reader, u *identity.User, md map[string]string) (entry, error) {
	var f *os.File
	var isNew bool
	if err := u.As(func() (err error) { f, isNew, err = openForWrite(path, u); return err }); err != nil {
		return entry{}, err
	}
	e, err := fill(f, path, src, u, md)
	if closeErr := f.Close(); err == nil && closeErr != nil {
		err = writeError(path, closeErr)
	}
	if err != nil && isNew {
		// Do not leave a partial file taking up space.
		_ = u.As(func() error { return os.Remove(path) })
	}
	return e, err
}

// openForWrite opens path for writing, truncated, creating it and its
// missing parents if needed; isNew says it did not exist. It runs as u.
func openForWrite(path string, u *identity.User) (f *os.File, isNew bool, err error) {
	if err := u.MkdirAll(filepath.Dir(path)); err != nil {
		switch {
		case noSpace(err):
			return nil, false, errorf(http.StatusInsufficientStorage, "not enough disk space to create '%s': %v", filepath.Dir(path), err)
		case errors.Is(err, fs.ErrExist):
			return nil, false, errorf(http.StatusBadRequest, "%v", err)
		case badPath(err):
			return nil, false, errorf(http.StatusBadRequest, "invalid path '%s': %v", path, err)
		case errors.Is(err, fs.ErrPermission):
			return nil, false, errorf(http.StatusForbidden, "creating parent directories of '%s' as %s: %v", path, u.Name, err)
		}
		return nil, false, errorf(http.StatusInternalServerError, "creating parent directories of '%s': %v", path, err)
	}
	fi, err := os.Stat(path)
	isNew = errors.Is(err, fs.ErrNotExist)
	switch {
	case err != nil && badPath(err):
		return nil, false, errorf(http.StatusBadRequest, "invalid path '%s': %v", path, err)
	case err != nil && errors.Is(err, fs.ErrPermission):
		return nil, false, errorf(http.StatusForbidden, "checking path '%s' as %s: %v", path, u.Name, err)
	case err != nil && !isNew:
		return nil, false, errorf(http.StatusInternalServerError, "checking path '%s': %v", path, err)
	case err == nil && fi.IsDir():
		return nil, false, errorf(http.StatusBadRequest, "path '%s' is a directory", path)
	case err == nil && !fi.Mode().IsRegular():
		return nil, false, errorf(http.StatusBadRequest, "path '%s' is not a regular file", path)
	}

	f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o666)
	switch {
	case errors.Is(err, syscall.EISDIR):
		return nil, false, errorf(http.StatusBadRequest, "path '%s' is a directory", path)
	case badPath(err):
		return nil, false, errorf(http.StatusBadRequest, "invalid path '%s': %v", path, err)
	case noSpace(err):
		return nil, false, errorf(http.StatusInsufficientStorage, "not enough disk space to create '%s': %v", path, err)
	case errors.Is(err, fs.ErrPermission):
		return nil, false, errorf(http.StatusForbidden, "opening '%s' for writing as %s: %v", path, u.Name, err)
	case err != nil:
		return nil, false, errorf(http.StatusInternalServerError, "opening '%s' for writing: %v", path, err)
	}
	if isNew {
		// 0666 less the usual umask 022, whatever envd's own umask is.
		if err := f.Chmod(0o644); err != nil {
			f.Close()
			return nil, false, errorf(http.StatusInternalServerError, "setting the mode of '%s': %v", path, err)
		}
	}
	return f, isNew, nil
}

func fill(f *os.File, path string, src io.Reader, u *identity.User, md map[string]string) (entry, error) {
	rs := &readSide{r: src}
	if _, err := io.Copy(f, rs); err != nil {
		if rs.err != nil {
			return entry{}, errorf(http.StatusBadRequest, "reading the body of '%s': %v", path, rs.err)
		}
		return entry{}, writeError(path, err)
	}
	if err := u.As(func() error { return fsmeta.Replace(path, md) }); err != nil {
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
