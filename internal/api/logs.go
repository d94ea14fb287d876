package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// A sandbox's own log (see sandbox.Manager.Logs): its lifecycle and
// envd's lines, live or after it ended.

// defaultLogLimit is how many lines a logs call returns when it names no
// limit.
const defaultLogLimit = 1000

// sandboxLogView is one SandboxLogEntry.
type sandboxLogView struct {
	Timestamp time.Time         `json:"timestamp"`
	Level     string            `json:"level"`
	Message   string            `json:"message"`
	Fields    map[string]string `json:"fields"`
}

// logLineView is one SandboxLog of the v1 route: the line is the entry as
// a JSON object, which `e2b sandbox logs` parses (level, logger) and
// prints.
type logLineView struct {
	Timestamp time.Time `json:"timestamp"`
	Line      string    `json:"line"`
}

// logsV1 implements GET /sandboxes/{id}/logs?start&limit (start in unix
// milliseconds), which `e2b sandbox logs` polls: the lines from start on,
// oldest first, both as lines and as entries.
func (h *Handler) logsV1(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	from, ok := unixParam(w, q.Get("start"), "start", true)
	if !ok {
		return
	}
	limit, ok := limitParam(w, q.Get("limit"))
	if !ok {
		return
	}
	lines, ok := h.logs(w, r, store.SandboxLogQuery{From: from, Limit: limit})
	if !ok {
		return
	}
	out := struct {
		Logs       []logLineView    `json:"logs"`
		LogEntries []sandboxLogView `json:"logEntries"`
	}{Logs: make([]logLineView, 0, len(lines)), LogEntries: make([]sandboxLogView, 0, len(lines))}
	for _, l := range lines {
		obj := make(map[string]string, len(l.Fields)+3)
		for k, v := range l.Fields {
			obj[k] = v
		}
		obj["level"], obj["logger"], obj["message"] = l.Level, l.Logger, l.Message
		line, _ := json.Marshal(obj) // strings only: cannot fail
		out.Logs = append(out.Logs, logLineView{Timestamp: l.Time.UTC(), Line: string(line)})
		out.LogEntries = append(out.LogEntries, sandboxLogEntry(l))
	}
	writeJSON(w, http.StatusOK, out)
}

// logsV2 implements GET /v2/sandboxes/{id}/logs?cursor&direction&level
// &limit&search (cursor in unix milliseconds).
func (h *Handler) logsV2(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	from, ok := unixParam(w, q.Get("cursor"), "cursor", true)
	if !ok {
		return
	}
	limit, ok := limitParam(w, q.Get("limit"))
	if !ok {
		return
	}
	query := store.SandboxLogQuery{From: from, Limit: limit, MinLevel: q.Get("level"), Search: q.Get("search")}
	switch d := q.Get("direction"); d {
	case "", "forward":
	case "backward":
		query.Backward = true
	default:
		writeError(w, http.StatusBadRequest, "direction must be forward or backward, got "+strconv.Quote(d))
		return
	}
	lines, ok := h.logs(w, r, query)
	if !ok {
		return
	}
	out := struct {
		Logs []sandboxLogView `json:"logs"`
	}{Logs: make([]sandboxLogView, 0, len(lines))}
	for _, l := range lines {
		out.Logs = append(out.Logs, sandboxLogEntry(l))
	}
	writeJSON(w, http.StatusOK, out)
}

// logs reads the log of the sandbox the path names; it answers the error
// itself and returns false on one.
func (h *Handler) logs(w http.ResponseWriter, r *http.Request, q store.SandboxLogQuery) ([]store.SandboxLog, bool) {
	id := r.PathValue("id")
	lines, err := h.sandboxes.Logs(r.Context(), id, q)
	if err != nil {
		h.fail(w, r, id, err)
		return nil, false
	}
	return lines, true
}

func sandboxLogEntry(l store.SandboxLog) sandboxLogView {
	fields := map[string]string{"logger": l.Logger}
	for k, v := range l.Fields {
		fields[k] = v
	}
	return sandboxLogView{Timestamp: l.Time.UTC(), Level: l.Level, Message: l.Message, Fields: fields}
}

// limitParam parses an optional limit of lines (defaultLogLimit when
// absent). It answers 400 itself and returns false on a bad value.
func limitParam(w http.ResponseWriter, v string) (int, bool) {
	if v == "" {
		return defaultLogLimit, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		writeError(w, http.StatusBadRequest, "limit must be a non-negative number of lines, got "+strconv.Quote(v))
		return 0, false
	}
	if n == 0 {
		n = defaultLogLimit
	}
	return n, true
}
