package api

import (
	"net/http"
	"strconv"
	"time"
)

// metricView is one SandboxMetric.
type metricView struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       uint64    `json:"memUsed"`
	MemTotal      uint64    `json:"memTotal"`
	MemCache      uint64    `json:"memCache"`
	DiskUsed      uint64    `json:"diskUsed"`
	DiskTotal     uint64    `json:"diskTotal"`
}

// metrics implements GET /sandboxes/{id}/metrics?start&end (unix seconds,
// both optional: start defaults to the sandbox's start, end to now).
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	q := r.URL.Query()
	start, ok := unixParam(w, q.Get("start"), "start", false)
	if !ok {
		return
	}
	end, ok := unixParam(w, q.Get("end"), "end", false)
	if !ok {
		return
	}
	if end.IsZero() {
		end = h.now()
	}
	if start.IsZero() {
		sb, err := h.sandboxes.Get(r.Context(), id)
		if err != nil {
			h.fail(w, r, id, err)
			return
		}
		start = sb.StartedAt
	}
	if end.Before(start) {
		writeError(w, http.StatusBadRequest, "end must not be before start")
		return
	}
	samples, err := h.sandboxes.Metrics(r.Context(), id, start, end)
	if err != nil {
		h.fail(w, r, id, err)
		return
	}
	out := make([]metricView, 0, len(samples))
	for _, m := range samples {
		ts := m.Timestamp.UTC()
		out = append(out, metricView{
			Timestamp:     ts,
			TimestampUnix: ts.Unix(),
			CPUCount:      m.CPUCount,
			CPUUsedPct:    m.CPUUsedPct,
			MemUsed:       m.MemUsed,
			MemTotal:      m.MemTotal,
			MemCache:      m.MemCache,
			DiskUsed:      m.DiskUsed,
			DiskTotal:     m.DiskTotal,
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// unixParam parses an optional query parameter, a unix time in seconds
// or, with milli, in milliseconds; the zero time means absent. It answers
// 400 itself and returns false on a bad value.
func unixParam(w http.ResponseWriter, v, name string, milli bool) (time.Time, bool) {
	if v == "" {
		return time.Time{}, true
	}
	unit, t := "seconds", func(n int64) time.Time { return time.Unix(n, 0) }
	if milli {
		unit, t = "milliseconds", time.UnixMilli
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > 1<<50 {
		writeError(w, http.StatusBadRequest, name+" must be a unix time in "+unit+", got "+strconv.Quote(v))
		return time.Time{}, false
	}
	return t(n).UTC(), true
}
