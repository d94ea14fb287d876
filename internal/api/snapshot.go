package api

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// snapshotInfo is SnapshotInfo. Mode is our extension (newer SDKs' name):
// "full" with processes and memory, "filesystem" with files only.
type snapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
	Mode       string   `json:"mode"`
}

// snapshotView gives sn's ID as E2B does: name:tag when it is named, else
// its own ID and tag; the same string everywhere, which Sandbox.create
// takes as its template.
func snapshotView(sn store.Snapshot) snapshotInfo {
	v := snapshotInfo{SnapshotID: sn.ID + ":" + sn.Tag, Names: []string{}, Mode: sandbox.ModeOf(sn.Kind)}
	if sn.Name != "" {
		v.SnapshotID, v.Names = sn.Name+":"+sn.Tag, []string{sn.Name}
	}
	return v
}

// createSnapshot implements POST /sandboxes/{id}/snapshots {name?, mode?}:
// 201 SnapshotInfo; the sandbox runs on.
func (h *Handler) createSnapshot(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var body struct {
		Name string `json:"name"`
		Mode string `json:"mode"`
	}
	if err := h.decodeBody(w, r, &body); err != nil && err != errNoBody {
		return
	}
	sn, err := h.sandboxes.CreateSnapshot(r.Context(), id, sandbox.SnapshotRequest{Name: body.Name, Mode: body.Mode})
	if err != nil {
		h.fail(w, r, id, err)
		return
	}
	writeJSON(w, http.StatusCreated, snapshotView(sn))
}

// listSnapshots implements GET /snapshots?sandboxID&name&limit&nextToken:
// the listed snapshots, newest first, paginated with X-Next-Token.
func (h *Handler) listSnapshots(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	q := sandbox.SnapshotQuery{SandboxID: v.Get("sandboxID"), Name: v.Get("name"), NextToken: v.Get("nextToken")}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("invalid limit %q: want an integer from 1 to %d", s, store.MaxListLimit))
			return
		}
		q.Limit = min(n, store.MaxListLimit)
	}
	sns, next, err := h.sandboxes.ListSnapshots(r.Context(), q)
	if err != nil {
		h.fail(w, r, "", err)
		return
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	out := make([]snapshotInfo, len(sns))
	for i, sn := range sns {
		out[i] = snapshotView(sn)
	}
	writeJSON(w, http.StatusOK, out)
}
