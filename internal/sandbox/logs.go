package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// Each sandbox's own log, which E2B's sandbox logs API serves: every line
// the server logs about the sandbox at info level or above (created,
// paused, resumed, out of memory, ended and why) and envd's own lines
// (processes started and ended, with their exit codes), kept in the store
// so that the log still explains a sandbox after it ended, until
// Config.LogRetention has passed.

const (
	// logKeep bounds one sandbox's log: its oldest lines go beyond it.
	logKeep = 2000
	// guestLogChunk bounds what one collection reads of a guest log.
	guestLogChunk = 1 << 20
	// DefaultLogRetention is how long an ended sandbox's log is kept.
	DefaultLogRetention = 24 * time.Hour
	// logPurgeEvery spaces the purges of ended sandboxes' logs, each a
	// scan of the ended sandboxes' records.
	logPurgeEvery = 10 * time.Minute

	// The loggers a sandbox's log lines come from.
	loggerLifecycle = "lifecycle"
	loggerEnvd      = "envd"
)

// Logs returns lines of sandbox id's log, live or ended (but not purged):
// envd's newest lines are collected first.
func (m *Manager) Logs(ctx context.Context, id string, q store.SandboxLogQuery) ([]store.SandboxLog, error) {
	if _, err := m.cfg.Store.GetSandbox(ctx, id); errors.Is(err, store.ErrNotFound) {
		return nil, notFound(id)
	} else if err != nil {
		return nil, err
	}
	if sb, err := m.lookup(id); err == nil {
		m.collectGuestLog(sb)
	}
	lines, err := m.cfg.Store.SandboxLogs(ctx, id, q)
	if errors.Is(err, store.ErrInvalid) {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return lines, err
}

// sandboxLog is the logger of sandbox id: the server's log, with
// sandbox_id, and, from info level up, the sandbox's own log.
func (m *Manager) sandboxLog(id string) *slog.Logger {
	return slog.New(&logTee{base: m.log.With("sandbox_id", id).Handler(), m: m, id: id})
}

// logTee is a slog.Handler that hands every record to base and records
// those at info level or above in sandbox id's log.
type logTee struct {
	base   slog.Handler
	m      *Manager
	id     string
	group  string // prefix of the next attributes' keys
	fields map[string]string
}

func (t *logTee) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || t.base.Enabled(ctx, l)
}

func (t *logTee) Handle(ctx context.Context, r slog.Record) error {
	var err error
	if t.base.Enabled(ctx, r.Level) {
		err = t.base.Handle(ctx, r)
	}
	if r.Level < slog.LevelInfo {
		return err
	}
	fields := make(map[string]string, len(t.fields)+r.NumAttrs())
	for k, v := range t.fields {
		fields[k] = v
	}
	r.Attrs(func(a slog.Attr) bool {
		addAttr(fields, t.group, a)
		return true
	})
	line := store.SandboxLog{Time: r.Time, Level: store.LevelName(r.Level), Logger: loggerLifecycle, Message: r.Message, Fields: fields}
	t.m.appendLogs(ctx, t.id, []store.SandboxLog{line})
	return err
}

func (t *logTee) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *t
	c.base = t.base.WithAttrs(attrs)
	c.fields = make(map[string]string, len(t.fields)+len(attrs))
	for k, v := range t.fields {
		c.fields[k] = v
	}
	for _, a := range attrs {
		addAttr(c.fields, t.group, a)
	}
	return &c
}

func (t *logTee) WithGroup(name string) slog.Handler {
	c := *t
	c.base = t.base.WithGroup(name)
	c.group = t.group + name + "."
	return &c
}

// addAttr adds a, its key after prefix, to fields; a group's attributes
// each under its own key.
func addAttr(fields map[string]string, prefix string, a slog.Attr) {
	v := a.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		for _, g := range v.Group() {
			addAttr(fields, prefix+a.Key+".", g)
		}
		return
	}
	fields[prefix+a.Key] = v.String()
}

// appendLogs records lines in sandbox id's log. A sandbox not recorded
// (yet, or any more) has no log, and its lines go to the server's log only.
func (m *Manager) appendLogs(ctx context.Context, id string, lines []store.SandboxLog) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := m.cfg.Store.AppendSandboxLogs(ctx, id, lines, logKeep); err != nil && !errors.Is(err, store.ErrNotFound) {
		m.log.Warn("recording a sandbox's log", "sandbox_id", id, "err", err)
	}
}

// collectGuestLog moves envd's lines that sb's instance printed since the
// last collection into sb's log, where its backend keeps them
// (isolation.GuestLogger). After a restart the server goes on from the
// end of an adopted sandbox's guest log (skipGuestLog): what envd printed
// while no server ran is not in the sandbox's log.
func (m *Manager) collectGuestLog(sb *sandbox) {
	inst := sb.instance()
	gl, ok := inst.(isolation.GuestLogger)
	if !ok || gl.GuestLog() == "" {
		return
	}
	sb.guestLogMu.Lock()
	defer sb.guestLogMu.Unlock()
	if sb.guestLogOf != inst {
		sb.guestLogOf, sb.guestLogAt = inst, 0
	}
	f, err := os.Open(gl.GuestLog())
	if err != nil {
		sb.log.Debug("reading envd's log", "err", err)
		return
	}
	defer f.Close()
	if _, err := f.Seek(sb.guestLogAt, io.SeekStart); err != nil {
		sb.log.Debug("reading envd's log", "err", err)
		return
	}
	data, err := io.ReadAll(io.LimitReader(f, guestLogChunk))
	if err != nil {
		sb.log.Debug("reading envd's log", "err", err)
		return
	}
	whole := bytes.LastIndexByte(data, '\n') + 1
	if whole == 0 && len(data) == guestLogChunk {
		whole = len(data) // one line longer than a chunk: skipped
	}
	sb.guestLogAt += int64(whole)
	var lines []store.SandboxLog
	for _, l := range strings.Split(string(data[:whole]), "\n") {
		if line, ok := parseEnvdLine(l); ok {
			lines = append(lines, line)
		}
	}
	m.appendLogs(context.Background(), sb.id, lines)
}

// skipGuestLog makes the next collection of sb's guest log begin at its
// current end; for an adopted sandbox, whose earlier lines were collected
// by the server before.
func (sb *sandbox) skipGuestLog() {
	inst := sb.instance()
	gl, ok := inst.(isolation.GuestLogger)
	if !ok {
		return
	}
	sb.guestLogMu.Lock()
	defer sb.guestLogMu.Unlock()
	sb.guestLogOf = inst
	if st, err := os.Stat(gl.GuestLog()); err == nil {
		sb.guestLogAt = st.Size()
	}
}

// parseEnvdLine reads one line of envd's log, slog's text format
// (time=… level=INFO msg="process ended" pid=12 exit_code=0), perhaps
// after "envd: "; false for anything else and for debug lines.
func parseEnvdLine(l string) (store.SandboxLog, bool) {
	l = strings.TrimPrefix(l, "envd: ")
	if !strings.HasPrefix(l, "time=") {
		return store.SandboxLog{}, false
	}
	line := store.SandboxLog{Logger: loggerEnvd, Fields: map[string]string{}}
	for l != "" {
		key, rest, ok := strings.Cut(l, "=")
		if !ok {
			return store.SandboxLog{}, false
		}
		var value string
		if strings.HasPrefix(rest, `"`) {
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				return store.SandboxLog{}, false
			}
			value, _ = strconv.Unquote(q)
			rest = rest[len(q):]
		} else {
			value, rest, _ = strings.Cut(rest, " ")
			rest = " " + rest
		}
		l = strings.TrimPrefix(rest, " ")
		switch key {
		case "time":
			t, err := time.Parse(time.RFC3339Nano, value)
			if err != nil {
				return store.SandboxLog{}, false
			}
			line.Time = t
		case "level":
			line.Level = strings.ToLower(value)
		case "msg":
			line.Message = value
		default:
			line.Fields[key] = value
		}
	}
	switch line.Level {
	case "info", "warn", "error":
		return line, !line.Time.IsZero() && line.Message != ""
	}
	return store.SandboxLog{}, false
}

// purgeLogs deletes the logs of sandboxes that ended longer than
// Config.LogRetention ago, unless it did less than logPurgeEvery ago.
func (m *Manager) purgeLogs() {
	now := m.cfg.Now()
	if last := m.logsPurgedAt.Load(); last != 0 && now.Sub(time.Unix(0, last)) < logPurgeEvery {
		return
	}
	m.logsPurgedAt.Store(now.UnixNano())
	n, err := m.cfg.Store.PurgeSandboxLogs(context.Background(), m.cfg.Now().Add(-m.cfg.LogRetention))
	if err != nil {
		m.log.Warn("purging the logs of ended sandboxes", "err", err)
		return
	}
	if n > 0 {
		m.log.Debug("purged the logs of ended sandboxes", "lines", n, "retention", m.cfg.LogRetention)
	}
}
