package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/volume"
)

// The volume content API (E2B's openapi-volumecontent): a volume's files
// without any sandbox, authenticated by the volume's token (Authorization:
// Bearer), never by an API key. Every route takes the path in the volume
// as the query parameter path. Errors are {"code": "<status>", "message"}:
// here the code is a string.

// contentRoutes registers the content API.
func (h *Handler) contentRoutes() {
	for pattern, fn := range map[string]contentHandler{
		"GET /volumecontent/{volumeID}/path":    h.statEntry,
		"PATCH /volumecontent/{volumeID}/path":  h.updateEntry,
		"DELETE /volumecontent/{volumeID}/path": h.removeEntry,
		"GET /volumecontent/{volumeID}/dir":     h.listDir,
		"POST /volumecontent/{volumeID}/dir":    h.makeDir,
		"GET /volumecontent/{volumeID}/file":    h.readFile,
		"PUT /volumecontent/{volumeID}/file":    h.writeFile,
	} {
		h.mux.Handle(pattern, h.volumeAuth(fn))
	}
}

// contentHandler serves one content route on the volume's root, with the
// path query parameter.
type contentHandler func(w http.ResponseWriter, r *http.Request, root *os.Root, path string)

// volumeAuth checks the bearer token and opens the volume for next.
func (h *Handler) volumeAuth(next contentHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || token == "" {
			writeContentError(w, http.StatusUnauthorized, "missing volume token: send Authorization: Bearer <token>")
			return
		}
		root, err := h.volumes.Open(r.Context(), r.PathValue("volumeID"), token)
		if err != nil {
			h.failContent(w, r, err)
			return
		}
		defer root.Close()
		path := r.URL.Query().Get("path")
		if path == "" {
			writeContentError(w, http.StatusBadRequest, "the query parameter path is required")
			return
		}
		next(w, r, root, path)
	})
}

// entryView is VolumeEntryStat.
type entryView struct {
	Name   string    `json:"name"`
	Type   string    `json:"type"`
	Path   string    `json:"path"`
	Size   int64     `json:"size"`
	Mode   uint32    `json:"mode"`
	UID    uint32    `json:"uid"`
	GID    uint32    `json:"gid"`
	Atime  time.Time `json:"atime"`
	Mtime  time.Time `json:"mtime"`
	Ctime  time.Time `json:"ctime"`
	Target string    `json:"target,omitempty"`
}

func viewEntry(e volume.Entry) entryView {
	return entryView{Name: e.Name, Type: e.Type, Path: e.Path, Size: e.Size, Mode: e.Mode, UID: e.UID, GID: e.GID,
		Atime: e.Atime, Mtime: e.Mtime, Ctime: e.Ctime, Target: e.Target}
}

func (h *Handler) statEntry(w http.ResponseWriter, r *http.Request, root *os.Root, path string) {
	e, err := volume.Stat(root, path)
	h.answerEntry(w, r, http.StatusOK, e, err)
}

func (h *Handler) updateEntry(w http.ResponseWriter, r *http.Request, root *os.Root, path string) {
	var body struct {
		UID  *uint32 `json:"uid"`
		GID  *uint32 `json:"gid"`
		Mode *uint32 `json:"mode"`
	}
	if err := h.decodeBody(w, r, &body); err != nil && err != errNoBody {
		return
	}
	e, err := volume.SetAttrs(root, path, volume.Attrs{UID: body.UID, GID: body.GID, Mode: body.Mode})
	h.answerEntry(w, r, http.StatusOK, e, err)
}

func (h *Handler) removeEntry(w http.ResponseWriter, r *http.Request, root *os.Root, path string) {
	if err := volume.Remove(root, path); err != nil {
		h.failContent(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) listDir(w http.ResponseWriter, r *http.Request, root *os.Root, path string) {
	depth, msg := queryUint(r, "depth")
	if msg != "" {
		writeContentError(w, http.StatusBadRequest, msg)
		return
	}
	d := uint32(1)
	if depth != nil {
		d = min(*depth, 64)
	}
	es, err := volume.List(root, path, int(d))
	if err != nil {
		h.failContent(w, r, err)
		return
	}
	out := make([]entryView, len(es))
	for i, e := range es {
		out[i] = viewEntry(e)
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Handler) makeDir(w http.ResponseWriter, r *http.Request, root *os.Root, path string) {
	a, force, msg := writeParams(r)
	if msg != "" {
		writeContentError(w, http.StatusBadRequest, msg)
		return
	}
	e, err := volume.MakeDir(root, path, a, force)
	h.answerEntry(w, r, http.StatusCreated, e, err)
}

func (h *Handler) readFile(w http.ResponseWriter, r *http.Request, root *os.Root, path string) {
	f, e, err := volume.OpenFile(root, path)
	if err != nil {
		h.failContent(w, r, err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(e.Size, 10))
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, f) // the client is gone if this fails
}

func (h *Handler) writeFile(w http.ResponseWriter, r *http.Request, root *os.Root, path string) {
	a, force, msg := writeParams(r)
	if msg != "" {
		writeContentError(w, http.StatusBadRequest, msg)
		return
	}
	e, err := volume.WriteFile(root, path, r.Body, a, force)
	h.answerEntry(w, r, http.StatusCreated, e, err)
}

// writeParams reads uid, gid, mode and force; the message is empty when
// they are valid.
func writeParams(r *http.Request) (volume.Attrs, bool, string) {
	var a volume.Attrs
	for _, p := range []struct {
		name string
		dst  **uint32
	}{{"uid", &a.UID}, {"gid", &a.GID}, {"mode", &a.Mode}} {
		v, msg := queryUint(r, p.name)
		if msg != "" {
			return a, false, msg
		}
		*p.dst = v
	}
	force := false
	if s := r.URL.Query().Get("force"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return a, false, fmt.Sprintf("force %q: want true or false", s)
		}
		force = b
	}
	return a, force, ""
}

// queryUint reads an optional uint32 query parameter.
func queryUint(r *http.Request, name string) (*uint32, string) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return nil, ""
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return nil, fmt.Sprintf("%s %q: want a decimal number below 2^32", name, s)
	}
	v := uint32(n)
	return &v, ""
}

// answerEntry writes e with status, or the error.
func (h *Handler) answerEntry(w http.ResponseWriter, r *http.Request, status int, e volume.Entry, err error) {
	if err != nil {
		h.failContent(w, r, err)
		return
	}
	writeJSON(w, status, viewEntry(e))
}

// failContent answers a content API error.
func (h *Handler) failContent(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, volume.ErrUnauthorized):
		writeContentError(w, http.StatusUnauthorized, err.Error())
	case errors.Is(err, volume.ErrNotFound), errors.Is(err, volume.ErrPathNotFound):
		writeContentError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, volume.ErrPathExists), errors.Is(err, volume.ErrInUse):
		// In use: attached to a VM sandbox, whose kernel mounts it.
		writeContentError(w, http.StatusConflict, err.Error())
	case errors.Is(err, volume.ErrInvalid):
		writeContentError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, volume.ErrFull):
		writeContentError(w, http.StatusInsufficientStorage, err.Error())
	default:
		h.log.Error("volume content request", "method", r.Method, "path", r.URL.Path, "err", err)
		writeContentError(w, http.StatusInternalServerError, internalMessage)
	}
}

// writeContentError writes the content API's error body, whose code is a
// string.
func writeContentError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{strconv.Itoa(status), msg})
}
