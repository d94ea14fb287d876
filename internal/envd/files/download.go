package files

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"io/fs"
	"math"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/agent-sandbox/agent-sandbox/internal/envd/identity"
)

// sniffLen is how much of a file http.DetectContentType looks at.
const sniffLen = 512

// download serves GET /files: the file at the path query parameter, gzip'ed
// when the client asks for it, else with Range and conditional requests.
func (h *Handler) download(w http.ResponseWriter, r *http.Request, u *identity.User) error {
	path, err := h.resolve(r.URL.Query().Get("path"), u)
	if err != nil {
		return err
	}
	enc, ok := chooseEncoding(r.Header)
	if !ok {
		return errorf(http.StatusNotAcceptable, "no acceptable content encoding: this endpoint serves gzip and identity")
	}
	// Opened as u, who must be allowed to read it; read from then on.
	var f *os.File
	if err := u.As(func() (err error) { f, err = openRegular(path); return err }); err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return errorf(http.StatusInternalServerError, "checking '%s': %v", path, err)
	}

	name := filepath.Base(path)
	w.Header().Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": name}))
	w.Header().Add("Vary", "Accept-Encoding")
	if enc != "gzip" {
		http.ServeContent(w, r, name, fi.ModTime(), f)
		return nil
	}

	sniff := make([]byte, sniffLen)
	n, err := io.ReadFull(f, sniff)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return errorf(http.StatusInternalServerError, "reading '%s': %v", path, err)
	}
	sniff = sniff[:n]
	ctype := mime.TypeByExtension(filepath.Ext(name))
	if ctype == "" {
		ctype = http.DetectContentType(sniff)
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Content-Encoding", "gzip")
	if !fi.ModTime().IsZero() {
		w.Header().Set("Last-Modified", fi.ModTime().UTC().Format(http.TimeFormat))
	}
	w.WriteHeader(http.StatusOK)
	// The deflate stream comes out in small pieces, and Node's fetch (the
	// SDK's transport) decompresses a body of many small chunks orders of
	// magnitude slower than one of large chunks (100 MB: minutes vs 2 s), so
	// coalesce before writing. Level 1: files are often already compressed.
	out := bufio.NewWriterSize(w, gzipChunkSize)
	gz, _ := gzip.NewWriterLevel(out, gzip.BestSpeed) // the level is valid
	if _, err := io.Copy(gz, io.MultiReader(bytes.NewReader(sniff), f)); err != nil {
		// The status is sent: cut the response so the client sees a
		// truncated body instead of a clean end.
		h.log.Warn("sending file", "path", path, "err", err)
		panic(http.ErrAbortHandler)
	}
	if err := errors.Join(gz.Close(), out.Flush()); err != nil {
		h.log.Warn("sending file", "path", path, "err", err)
		panic(http.ErrAbortHandler)
	}
	return nil
}

// openRegular opens path for reading if it is a regular file. It stats
// first, so that a FIFO or device never blocks the open.
func openRegular(path string) (*os.File, error) {
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return nil, readError(path, err)
	case fi.IsDir():
		return nil, errorf(http.StatusBadRequest, "path '%s' is a directory", path)
	case !fi.Mode().IsRegular():
		return nil, errorf(http.StatusBadRequest, "path '%s' is not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, readError(path, err)
	}
	return f, nil
}

// gzipChunkSize is the size of the pieces a gzip'ed download is written in.
const gzipChunkSize = 256 << 10

// conditionalHeaders make a GET partial or conditional; such requests are
// served uncompressed, by http.ServeContent.
var conditionalHeaders = []string{"Range", "If-Range", "If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since"}

// chooseEncoding picks "gzip" or "identity" for the response from the
// request's Accept-Encoding and whether it is partial or conditional.
// ok is false when the client accepts neither.
func chooseEncoding(hdr http.Header) (enc string, ok bool) {
	q := acceptEncoding(hdr.Values("Accept-Encoding"))
	gzipQ := weight(q, "gzip")
	if xq := weight(q, "x-gzip"); xq > gzipQ {
		gzipQ = xq
	}
	// identity is acceptable unless refused (RFC 9110 §12.5.3); when it is
	// not listed, any gzip the client lists is preferred to it.
	identityQ := math.SmallestNonzeroFloat64
	if v, ok := q["identity"]; ok {
		identityQ = v
	} else if v, ok := q["*"]; ok {
		identityQ = v
	}
	switch {
	case gzipQ > 0 && identityQ == 0:
		return "gzip", true
	case gzipQ > 0 && gzipQ >= identityQ && !conditional(hdr):
		return "gzip", true
	case identityQ > 0:
		return "identity", true
	}
	return "", false
}

func conditional(hdr http.Header) bool {
	for _, k := range conditionalHeaders {
		if hdr.Get(k) != "" {
			return true
		}
	}
	return false
}

// weight is the q-value of coding, falling back to "*"; 0 when neither is
// listed.
func weight(q map[string]float64, coding string) float64 {
	if v, ok := q[coding]; ok {
		return v
	}
	return q["*"]
}

// acceptEncoding parses Accept-Encoding header values into the q-value of
// each listed coding (lower-cased). Elements with a malformed q are ignored.
func acceptEncoding(values []string) map[string]float64 {
	q := map[string]float64{}
	for _, v := range values {
		for elem := range strings.SplitSeq(v, ",") {
			coding, params, _ := strings.Cut(elem, ";")
			coding = strings.ToLower(strings.TrimSpace(coding))
			if coding == "" {
				continue
			}
			w, ok := 1.0, true
			for p := range strings.SplitSeq(params, ";") {
				k, val, _ := strings.Cut(p, "=")
				if !strings.EqualFold(strings.TrimSpace(k), "q") {
					continue
				}
				f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
				if err != nil || f < 0 || f > 1 {
					ok = false
					break
				}
				w = f
			}
			if ok {
				q[coding] = w
			}
		}
	}
	return q
}

// readError answers a path that cannot be read by what is wrong with it: a
// component under a regular file names nothing, as a missing one does.
func readError(path string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		return errorf(http.StatusNotFound, "path '%s' does not exist", path)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return errorf(http.StatusBadRequest, "invalid path '%s': %v", path, err)
	case errors.Is(err, fs.ErrPermission):
		return errorf(http.StatusForbidden, "reading '%s': %v", path, err)
	}
	return errorf(http.StatusInternalServerError, "reading '%s': %v", path, err)
}
