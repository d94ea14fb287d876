package api

import (
	"errors"
	"io"
	"mime"
	"net/http"
	"path"
	"time"

	"github.com/agent-sandbox/agent-sandbox/gen/filesystem"
)

// maxDashboardUpload bounds a file uploaded through the dashboard: a
// person's file, not a disk image (the SDK's files API has no bound).
const maxDashboardUpload = 100 << 20

// fileEntryView is one entry of a directory the dashboard lists.
type fileEntryView struct {
	Name     string    `json:"name"`
	Path     string    `json:"path"`
	Type     string    `json:"type"` // "file", "dir" or "other"
	Size     int64     `json:"size"`
	Modified time.Time `json:"modified"`
}

// directoryView is the answer of the dashboard's directory listing.
type directoryView struct {
	Path    string          `json:"path"`
	Entries []fileEntryView `json:"entries"`
}

// fileType is the dashboard's name of an envd file type.
func fileType(t filesystem.FileType) string {
	switch t {
	case filesystem.FileType_FILE_TYPE_FILE:
		return "file"
	case filesystem.FileType_FILE_TYPE_DIRECTORY:
		return "dir"
	}
	return "other"
}

// pathParam reads the required query parameter path; it answers 400 and
// returns false when it is missing.
func pathParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	p := r.URL.Query().Get("path")
	if p == "" {
		writeError(w, http.StatusBadRequest, "path is required: a path in the sandbox (absolute, or relative to the user's home)")
		return "", false
	}
	return p, true
}

// listFiles implements GET /dashboard/api/sandboxes/{id}/files?path=: the
// directory at path, one level deep.
func (h *Handler) listFiles(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	p, ok := pathParam(w, r)
	if !ok {
		return
	}
	dir, err := h.sandboxes.ListDir(r.Context(), id, p)
	if err != nil {
		h.fail(w, r, id, err)
		return
	}
	out := directoryView{Path: dir.Path, Entries: make([]fileEntryView, 0, len(dir.Entries))}
	for _, e := range dir.Entries {
		out.Entries = append(out.Entries, fileEntryView{
			Name: e.GetName(), Path: e.GetPath(), Type: fileType(e.GetType()), Size: e.GetSize(),
			Modified: e.GetModifiedTime().AsTime().UTC(),
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// downloadFile implements GET /dashboard/api/sandboxes/{id}/files/content?path=:
// the file at path, as an attachment.
func (h *Handler) downloadFile(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	p, ok := pathParam(w, r)
	if !ok {
		return
	}
	f, err := h.sandboxes.ReadFile(r.Context(), id, p)
	if err != nil {
		h.fail(w, r, id, err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(p)}))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if _, err := io.Copy(w, f); err != nil {
		h.log.Debug("sending a file to the dashboard", "sandbox_id", id, "path", p, "err", err)
	}
}

// uploadFile implements POST /dashboard/api/sandboxes/{id}/files/content?path=:
// the body, up to maxDashboardUpload, becomes the file at path.
func (h *Handler) uploadFile(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	p, ok := pathParam(w, r)
	if !ok {
		return
	}
	if r.ContentLength > maxDashboardUpload {
		writeError(w, http.StatusRequestEntityTooLarge, "body: a dashboard upload is at most 100 MiB")
		return
	}
	body := http.MaxBytesReader(w, r.Body, maxDashboardUpload)
	if err := h.sandboxes.WriteFile(r.Context(), id, p, body); err != nil {
		if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
			writeError(w, http.StatusRequestEntityTooLarge, "body: a dashboard upload is at most 100 MiB")
			return
		}
		h.fail(w, r, id, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
