package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// networkUpdateBody is SandboxNetworkUpdateConfig.
type networkUpdateBody struct {
	AllowOut            []string        `json:"allowOut"`
	DenyOut             []string        `json:"denyOut"`
	AllowInternetAccess *bool           `json:"allow_internet_access"`
	Rules               json.RawMessage `json:"rules"`
	EgressProxy         json.RawMessage `json:"egressProxy"`
}

// updateNetwork implements PUT /sandboxes/{id}/network: the body replaces
// the sandbox's whole egress config (absent fields are cleared), live.
func (h *Handler) updateNetwork(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var body networkUpdateBody
	if err := h.decodeBody(w, r, &body); err != nil && !errors.Is(err, errNoBody) {
		return
	}
	if !emptyJSON(body.EgressProxy) {
		writeError(w, http.StatusBadRequest, "egressProxy (a SOCKS5 egress proxy) is not supported by this server")
		return
	}
	err := h.sandboxes.UpdateNetwork(r.Context(), id, sandbox.NetworkUpdate{
		AllowOut:            body.AllowOut,
		DenyOut:             body.DenyOut,
		AllowInternetAccess: body.AllowInternetAccess,
		Rules:               body.Rules,
	})
	if err != nil {
		h.fail(w, r, id, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// emptyJSON reports whether v is absent, null, {} or [].
func emptyJSON(v json.RawMessage) bool {
	switch string(v) {
	case "", "null", "{}", "[]":
		return true
	}
	return false
}

// egressEventView is one egress decision of the audit trail.
type egressEventView struct {
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	Name    string    `json:"name,omitempty"`
	Type    string    `json:"type,omitempty"`
	Proto   string    `json:"proto,omitempty"`
	Addrs   []string  `json:"addrs,omitempty"`
	Port    uint16    `json:"port,omitempty"`
	Allowed bool      `json:"allowed"`
	Rule    string    `json:"rule"`
}

// egressAuditView is the answer of GET /sandboxes/{id}/network/audit.
type egressAuditView struct {
	Events []egressEventView `json:"events"`
	// Next is the cursor for the next call (?after=Next).
	Next uint64 `json:"next"`
}

// maxAuditLimit bounds one page of the audit trail.
const maxAuditLimit = 1000

// egressAudit implements GET /sandboxes/{id}/network/audit?after=N&limit=M
// (our extension): the sandbox's egress decisions with a sequence number
// above after, oldest first.
func (h *Handler) egressAudit(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	q := r.URL.Query()
	after, err := optionalUint(q.Get("after"), 0)
	if err != nil {
		writeError(w, http.StatusBadRequest, "after must be a non-negative integer, got "+strconv.Quote(q.Get("after")))
		return
	}
	limit, err := optionalUint(q.Get("limit"), maxAuditLimit)
	if err != nil || limit == 0 || limit > maxAuditLimit {
		writeError(w, http.StatusBadRequest, "limit must be an integer from 1 to "+strconv.Itoa(maxAuditLimit)+", got "+strconv.Quote(q.Get("limit")))
		return
	}
	events, next, err := h.sandboxes.EgressEvents(id, after, int(limit))
	if errors.Is(err, sandbox.ErrNoAudit) {
		writeError(w, http.StatusNotImplemented, err.Error())
		return
	}
	if err != nil {
		h.fail(w, r, id, err)
		return
	}
	out := egressAuditView{Events: make([]egressEventView, 0, len(events)), Next: next}
	for _, e := range events {
		v := egressEventView{
			Seq: e.Seq, Time: e.Time.UTC(), Kind: e.Kind, Name: e.Name, Type: e.Type, Proto: e.Proto,
			Port: e.Port, Allowed: e.Allowed, Rule: e.Rule,
		}
		for _, a := range e.Addrs {
			v.Addrs = append(v.Addrs, a.String())
		}
		out.Events = append(out.Events, v)
	}
	writeJSON(w, http.StatusOK, out)
}

// optionalUint parses a non-negative integer query parameter, def when
// absent.
func optionalUint(v string, def uint64) (uint64, error) {
	if v == "" {
		return def, nil
	}
	return strconv.ParseUint(v, 10, 64)
}
