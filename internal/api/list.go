package api

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// listV2 implements GET /v2/sandboxes (spec §2.5): filters by metadata,
// state, template and start time, ordered, paginated with X-Next-Token.
func (h *Handler) listV2(w http.ResponseWriter, r *http.Request) {
	q, msg := parseListQuery(r.URL.Query())
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	sbs, next, err := h.sandboxes.List(r.Context(), q)
	if err != nil {
		h.fail(w, r, "", err)
		return
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	h.writeList(w, sbs)
}

// legacyListPages bounds the pages GET /sandboxes collects.
const legacyListPages = 100

// listLegacy implements the deprecated GET /sandboxes: every running
// sandbox, optionally filtered by metadata, unpaginated.
func (h *Handler) listLegacy(w http.ResponseWriter, r *http.Request) {
	q := store.ListQuery{States: []store.State{store.StateRunning}, Limit: store.MaxListLimit}
	if v := r.URL.Query().Get("metadata"); v != "" {
		md, msg := decodeMetadata(v)
		if msg != "" {
			writeError(w, http.StatusBadRequest, msg)
			return
		}
		q.Metadata = md
	}
	all := []store.Sandbox{}
	for range legacyListPages {
		sbs, next, err := h.sandboxes.List(r.Context(), q)
		if err != nil {
			h.fail(w, r, "", err)
			return
		}
		all = append(all, sbs...)
		if next == "" {
			break
		}
		q.NextToken = next
	}
	h.writeList(w, all)
}

func (h *Handler) writeList(w http.ResponseWriter, sbs []store.Sandbox) {
	out := make([]listedView, 0, len(sbs))
	for _, sb := range sbs {
		out = append(out, h.listedView(sb))
	}
	writeJSON(w, http.StatusOK, out)
}

// parseListQuery reads the GET /v2/sandboxes query; the message is empty
// when it is valid.
func parseListQuery(v url.Values) (store.ListQuery, string) {
	var q store.ListQuery
	if s := v.Get("metadata"); s != "" {
		md, msg := decodeMetadata(s)
		if msg != "" {
			return q, msg
		}
		q.Metadata = md
	}
	if s := v.Get("state"); s != "" {
		for _, st := range strings.Split(s, ",") {
			switch store.State(st) {
			case store.StateRunning, store.StatePaused:
				q.States = append(q.States, store.State(st))
			default:
				return q, fmt.Sprintf("invalid state %q: want running or paused", st)
			}
		}
	}
	switch o := v.Get("order"); o {
	case "":
	case "asc", "desc":
		q.Order = store.Order(o)
	default:
		return q, fmt.Sprintf("invalid order %q: want asc or desc", o)
	}
	if s := v.Get("startedAfter"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return q, fmt.Sprintf("invalid startedAfter %q: want an RFC 3339 time", s)
		}
		q.StartedAfter = t
	}
	if s := v.Get("template"); s != "" {
		if strings.Contains(s, ":") {
			return q, fmt.Sprintf("invalid template %q: tags are not allowed here", s)
		}
		q.TemplateID = s
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return q, fmt.Sprintf("invalid limit %q: want an integer from 1 to %d", s, store.MaxListLimit)
		}
		q.Limit = min(n, store.MaxListLimit)
	}
	q.NextToken = v.Get("nextToken")
	return q, ""
}

// decodeMetadata decodes the layered metadata filter (spec §2.5) the way
// E2B does: s was URL-decoded once by net/http; unescape it again, split on
// &, split each pair on = into exactly two parts, unescape key and value.
// The message is empty on success.
func decodeMetadata(s string) (map[string]string, string) {
	raw, err := url.QueryUnescape(s)
	if err != nil {
		return nil, fmt.Sprintf("invalid metadata filter: %v", err)
	}
	md := make(map[string]string)
	for _, pair := range strings.Split(raw, "&") {
		kv := strings.Split(pair, "=")
		if len(kv) != 2 {
			return nil, fmt.Sprintf("invalid metadata filter %q: want key=value pairs", pair)
		}
		k, err := url.QueryUnescape(kv[0])
		if err != nil {
			return nil, fmt.Sprintf("invalid metadata key %q: %v", kv[0], err)
		}
		val, err := url.QueryUnescape(kv[1])
		if err != nil {
			return nil, fmt.Sprintf("invalid metadata value %q: %v", kv[1], err)
		}
		md[k] = val
	}
	return md, ""
}
