package api

import (
	"context"
	"errors"
	"net/http"
	"os"

	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/volume"
)

// Volumes is what the API needs of the volumes; *volume.Service
// implements it.
type Volumes interface {
	Create(ctx context.Context, name string) (store.Volume, string, error)
	Get(ctx context.Context, id string) (store.Volume, string, error)
	List(ctx context.Context) ([]store.Volume, error)
	Delete(ctx context.Context, id string) error
	// Open checks a content request's token and returns the volume's
	// root.
	Open(ctx context.Context, id, token string) (*os.Root, error)
}

var _ Volumes = (*volume.Service)(nil)

// volumeRoutes registers E2B's volume API: the control plane (API key)
// and the content API (the volume's bearer token), both on this host.
func (h *Handler) volumeRoutes() {
	h.mux.Handle("POST /volumes", h.auth(h.createVolume))
	h.mux.Handle("GET /volumes", h.auth(h.listVolumes))
	h.mux.Handle("GET /volumes/{volumeID}", h.auth(h.getVolume))
	h.mux.Handle("DELETE /volumes/{volumeID}", h.auth(h.deleteVolume))
	h.contentRoutes()
}

// volumeView is VolumeAndToken; the list leaves the token out.
type volumeView struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
	Token    string `json:"token,omitempty"`
}

// createVolume implements POST /volumes {name}: 201 with a token.
func (h *Handler) createVolume(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Name string `json:"name"`
	}
	if !h.decodeRequiredBody(w, r, &body) {
		return
	}
	v, token, err := h.volumes.Create(r.Context(), body.Name)
	if err != nil {
		h.failVolume(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, volumeView{VolumeID: v.ID, Name: v.Name, Token: token})
}

// listVolumes implements GET /volumes.
func (h *Handler) listVolumes(w http.ResponseWriter, r *http.Request) {
	vs, err := h.volumes.List(r.Context())
	if err != nil {
		h.failVolume(w, r, err)
		return
	}
	out := make([]volumeView, len(vs))
	for i, v := range vs {
		out[i] = volumeView{VolumeID: v.ID, Name: v.Name}
	}
	writeJSON(w, http.StatusOK, out)
}

// getVolume implements GET /volumes/{volumeID}: a fresh token each time.
func (h *Handler) getVolume(w http.ResponseWriter, r *http.Request) {
	v, token, err := h.volumes.Get(r.Context(), r.PathValue("volumeID"))
	if err != nil {
		h.failVolume(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, volumeView{VolumeID: v.ID, Name: v.Name, Token: token})
}

// deleteVolume implements DELETE /volumes/{volumeID}: 204, 404 (the SDK's
// false), 409 while a sandbox mounts it.
func (h *Handler) deleteVolume(w http.ResponseWriter, r *http.Request) {
	if err := h.volumes.Delete(r.Context(), r.PathValue("volumeID")); err != nil {
		h.failVolume(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// failVolume answers a control-plane volume error.
func (h *Handler) failVolume(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, volume.ErrNotFound):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, volume.ErrInvalid), errors.Is(err, volume.ErrExists):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, volume.ErrInUse):
		writeError(w, http.StatusConflict, err.Error())
	default:
		h.fail(w, r, "", err)
	}
}
