package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/fetch"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// Log bounds: a build keeps at most maxBuildLogs lines of at most
// maxLogLine bytes; a status answer carries at most maxLogsPage lines (the
// SDK polls until it gets none).
const (
	maxBuildLogs = 10000
	maxLogLine   = 4096
	maxLogsPage  = 1000
)

// buildRun is a triggered build that has not finished: its log so far.
type buildRun struct {
	// template is the template built, from the template it starts from
	// (a name or a version ID, as the spec has it).
	template, from string

	mu      sync.Mutex // guards logs and dropped
	logs    []store.BuildLogEntry
	dropped int
}

func (r *buildRun) add(e store.BuildLogEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(e.Message) > maxLogLine {
		e.Message = e.Message[:maxLogLine] + "…"
	}
	if len(r.logs) >= maxBuildLogs-1 {
		r.dropped++
		return
	}
	r.logs = append(r.logs, e)
}

// snapshot returns the log from offset on, at most limit lines.
func (r *buildRun) snapshot(offset, limit int) []store.BuildLogEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	if offset >= len(r.logs) {
		return nil
	}
	end := min(len(r.logs), offset+limit)
	return append([]store.BuildLogEntry(nil), r.logs[offset:end]...)
}

// final returns the whole log, with a last line counting what was dropped.
func (r *buildRun) final(now time.Time) []store.BuildLogEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	logs := r.logs
	if r.dropped > 0 {
		logs = append(logs, store.BuildLogEntry{Time: now, Level: "warn",
			Message: fmt.Sprintf("%d more log lines were dropped (a build keeps %d)", r.dropped, maxBuildLogs)})
	}
	return logs
}

// startTemplateBuild implements POST /v2/templates/{templateID}/builds/{buildID}:
// the build is checked, queued and run in the background.
func (h *Handler) startTemplateBuild(w http.ResponseWriter, r *http.Request) {
	name, buildID := r.PathValue("templateID"), r.PathValue("buildID")
	b, ok := h.templateBuild(w, r, name, buildID)
	if !ok {
		return
	}
	var body buildBody
	if !h.decodeRequiredBody(w, r, &body) {
		return
	}
	if b.Status != store.BuildWaiting {
		writeError(w, http.StatusConflict, fmt.Sprintf("build %s was already started (it is %s)", buildID, b.Status))
		return
	}
	spec, err := h.templates.buildSpec(r.Context(), name, body, b.Resources)
	var se *specError
	if errors.As(err, &se) {
		writeError(w, http.StatusBadRequest, se.msg)
		return
	}
	if err != nil {
		h.templateFail(w, r, err)
		return
	}
	switch err := h.templates.start(r.Context(), b, spec); {
	case errors.Is(err, errQueueFull):
		w.Header().Set("Retry-After", "30")
		writeError(w, http.StatusTooManyRequests, err.Error())
	case errors.Is(err, store.ErrBuildState):
		writeError(w, http.StatusConflict, fmt.Sprintf("build %s was already started", buildID))
	case err != nil:
		h.templateFail(w, r, err)
	default:
		w.WriteHeader(http.StatusAccepted)
	}
}

// templateBuild returns the build the path names, or answers 400 or 404.
func (h *Handler) templateBuild(w http.ResponseWriter, r *http.Request, name, buildID string) (store.TemplateBuild, bool) {
	if !template.ValidName(name) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("templateID %q is not a template name", name))
		return store.TemplateBuild{}, false
	}
	b, err := h.templates.records.GetTemplateBuild(r.Context(), name, buildID)
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("build %q of template %q doesn't exist or you don't have access to it", buildID, name))
		return store.TemplateBuild{}, false
	}
	if err != nil {
		h.templateFail(w, r, err)
		return store.TemplateBuild{}, false
	}
	return b, true
}

var errQueueFull = errors.New("too many template builds are queued; retry later")

// start marks b building and runs spec for it in the background.
func (t *TemplateBuilds) start(ctx context.Context, b store.TemplateBuild, spec template.Spec) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.runs) >= t.maxQueued {
		return fmt.Errorf("%w (%d are)", errQueueFull, len(t.runs))
	}
	if err := t.ctx.Err(); err != nil {
		return fmt.Errorf("starting build %s: the server is shutting down: %w", b.ID, err)
	}
	if err := t.records.StartTemplateBuild(ctx, b.Template, b.ID); err != nil {
		return err
	}
	run := &buildRun{template: b.Template, from: spec.From}
	t.runs[b.ID] = run
	t.contexts.hold(spec)
	t.wg.Add(1)
	go t.run(b, spec, run)
	return nil
}

// run builds spec for b once the build slot is free, and records the end.
func (t *TemplateBuilds) run(b store.TemplateBuild, spec template.Spec, run *buildRun) {
	defer t.wg.Done()
	log := slog.New(&buildLogHandler{run: run, next: t.log.Handler(), now: t.now}).With("build_id", b.ID)
	res := store.BuildResult{Status: store.BuildError}
	if t.acquire(log) {
		tmpl, err := t.builder.Build(t.ctx, spec, log)
		<-t.slot
		if err == nil {
			res = store.BuildResult{Status: store.BuildReady, VersionID: tmpl.ID}
			log.Info("template " + tmpl.ID + " is ready")
		} else {
			res.Reason = buildReason(err, t.ctx.Err() != nil)
			log.Error("build failed: " + res.Reason.Message)
		}
	} else {
		res.Reason = store.BuildReason{Message: "the server stopped before the build started"}
	}
	res.Logs = run.final(t.now())
	if err := t.records.FinishTemplateBuild(context.WithoutCancel(t.ctx), b.ID, res); err != nil {
		t.log.Error("recording the end of a template build", "build_id", b.ID, "err", err)
	}
	t.mu.Lock()
	delete(t.runs, b.ID)
	t.mu.Unlock()
	t.contexts.release(spec)
}

// acquire takes the build slot, waiting for the build that holds it; it
// is false when the server stops first.
func (t *TemplateBuilds) acquire(log *slog.Logger) bool {
	select {
	case t.slot <- struct{}{}:
		return true
	default:
	}
	log.Info("waiting for another template build to finish")
	select {
	case t.slot <- struct{}{}:
		return true
	case <-t.ctx.Done():
		return false
	}
}

// buildReason describes a failed build: the step that failed and its last
// output, when a step failed.
func buildReason(err error, stopping bool) store.BuildReason {
	if stopping {
		return store.BuildReason{Message: "the server stopped during the build"}
	}
	var se *template.StepError
	if errors.As(err, &se) {
		return store.BuildReason{Message: se.Error(), Step: strconv.Itoa(se.Step), LogTail: se.LogTail}
	}
	// E2B's step name, which the SDK maps to the setStartCmd or
	// setReadyCmd call in the BuildError's stack.
	var ready *template.ReadyError
	if errors.As(err, &ready) {
		msg := ready.Error()
		if ready.Timeout > 0 {
			msg += "\n(the server's limit for a build's ready command: serve --build-ready-timeout)"
		}
		return store.BuildReason{Message: msg, Step: template.FinalizeStep, LogTail: ready.LogTail}
	}
	// The registry client's text around it repeats the refusal per URL
	// scheme it tried.
	var re *fetch.RefusedError
	if errors.As(err, &re) {
		return store.BuildReason{Message: "fromImage: " + re.Error()}
	}
	return store.BuildReason{Message: err.Error()}
}

// buildLogHandler is the slog.Handler of one build's logger: each record
// at info level or above becomes a log line of the build (with its "step"
// attribute as the step), and goes on to the server's log.
type buildLogHandler struct {
	run   *buildRun
	next  slog.Handler
	now   func() time.Time
	attrs []slog.Attr
}

// Enabled implements slog.Handler.
func (h *buildLogHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.next.Enabled(ctx, l)
}

// Handle implements slog.Handler.
func (h *buildLogHandler) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Level >= slog.LevelInfo {
		e := store.BuildLogEntry{Time: rec.Time, Level: store.LevelName(rec.Level), Message: rec.Message}
		if e.Time.IsZero() {
			e.Time = h.now()
		}
		var extra []string
		note := func(a slog.Attr) bool {
			switch a.Key {
			case "step":
				e.Step = a.Value.String()
			case "template", "build_id":
			default:
				extra = append(extra, a.Key+"="+a.Value.String())
			}
			return true
		}
		for _, a := range h.attrs {
			note(a)
		}
		rec.Attrs(note)
		if len(extra) > 0 {
			e.Message += " (" + strings.Join(extra, " ") + ")"
		}
		h.run.add(e)
	}
	if h.next.Enabled(ctx, rec.Level) {
		return h.next.Handle(ctx, rec)
	}
	return nil
}

// WithAttrs implements slog.Handler.
func (h *buildLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	c.next = h.next.WithAttrs(attrs)
	return &c
}

// WithGroup implements slog.Handler. The builder uses no groups; a
// group's attributes are noted without the group name.
func (h *buildLogHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	return &c
}

// logEntryView is BuildLogEntry.
type logEntryView struct {
	Timestamp time.Time `json:"timestamp"`
	Level     string    `json:"level"`
	Message   string    `json:"message"`
	Step      string    `json:"step,omitempty"`
}

// reasonView is BuildStatusReason.
type reasonView struct {
	Message    string         `json:"message"`
	Step       string         `json:"step,omitempty"`
	LogEntries []logEntryView `json:"logEntries"`
}

// buildStatusView is TemplateBuildInfo.
type buildStatusView struct {
	TemplateID string         `json:"templateID"`
	BuildID    string         `json:"buildID"`
	Status     string         `json:"status"`
	Logs       []string       `json:"logs"`
	LogEntries []logEntryView `json:"logEntries"`
	Reason     *reasonView    `json:"reason,omitempty"`
}

// templateBuildStatus implements GET
// /templates/{templateID}/builds/{buildID}/status?logsOffset=N: the
// build's state and its log lines from N on.
func (h *Handler) templateBuildStatus(w http.ResponseWriter, r *http.Request) {
	offset := 0
	if s := r.URL.Query().Get("logsOffset"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("logsOffset %q: want a non-negative integer", s))
			return
		}
		offset = n
	}
	name, buildID := r.PathValue("templateID"), r.PathValue("buildID")
	// The log of a running build is in memory until the run has stored
	// it with the build's end; look there first, so a build that ends
	// meanwhile is read from the store whole.
	h.templates.mu.Lock()
	run := h.templates.runs[buildID]
	h.templates.mu.Unlock()
	b, ok := h.templateBuild(w, r, name, buildID)
	if !ok {
		return
	}
	var logs []store.BuildLogEntry
	switch {
	case run != nil:
		logs = run.snapshot(offset, maxLogsPage)
		b.Status = store.BuildBuilding
	case b.Status == store.BuildReady || b.Status == store.BuildError:
		var err error
		if logs, err = h.templates.records.TemplateBuildLogs(r.Context(), buildID, offset, maxLogsPage); err != nil {
			h.templateFail(w, r, err)
			return
		}
	}
	out := buildStatusView{TemplateID: name, BuildID: buildID, Status: string(b.Status), Logs: []string{}, LogEntries: []logEntryView{}}
	for _, e := range logs {
		out.LogEntries = append(out.LogEntries, logEntryView{Timestamp: e.Time, Level: e.Level, Message: e.Message, Step: e.Step})
		out.Logs = append(out.Logs, e.Time.Format(time.RFC3339)+" "+e.Message)
	}
	if b.Status == store.BuildError {
		out.Reason = &reasonView{Message: b.Reason.Message, Step: b.Reason.Step, LogEntries: []logEntryView{}}
		for _, line := range b.Reason.LogTail {
			out.Reason.LogEntries = append(out.Reason.LogEntries, logEntryView{Timestamp: b.FinishedAt, Level: "error", Message: line, Step: b.Reason.Step})
		}
	}
	writeJSON(w, http.StatusOK, out)
}
