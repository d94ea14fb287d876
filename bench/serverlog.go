package bench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// Messages of every server's log (internal/sandbox, info): a create
// served by the warm pool, and one that boots its sandbox.
const (
	logPoolCreate = "creating sandbox from the warm pool"
	logColdCreate = "creating sandbox"
)

// logEntry is one line of a server's log (slog's text format), its
// attributes by key: "msg" is the message.
type logEntry map[string]string

// parseLogLine reads key=value pairs, values bare or Go-quoted, as slog's
// TextHandler writes them; it stops at the first pair it cannot read.
func parseLogLine(line string) logEntry {
	e := logEntry{}
	for {
		line = strings.TrimLeft(line, " ")
		key, rest, ok := strings.Cut(line, "=")
		if !ok || key == "" || strings.ContainsAny(key, " \"") {
			return e
		}
		if strings.HasPrefix(rest, `"`) {
			quoted, err := strconv.QuotedPrefix(rest)
			if err != nil {
				return e
			}
			e[key], _ = strconv.Unquote(quoted)
			line = rest[len(quoted):]
			continue
		}
		value, after, _ := strings.Cut(rest, " ")
		e[key], line = value, after
	}
}

// logged is what a server logged over some span of a run.
type logged []logEntry

// readLog returns the entries logged at path from offset on: whole lines
// only, a line being written is read by the next call.
func readLog(path string, offset int64) (logged, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the server log: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, fmt.Errorf("reading the server log: %w", err)
	}
	var entries logged
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return entries, nil
		}
		entries = append(entries, parseLogLine(strings.TrimSuffix(line, "\n")))
	}
}

// with returns the entries with message msg that pass keep (nil: all).
func (l logged) with(msg string, keep func(logEntry) bool) logged {
	var out logged
	for _, e := range l {
		if e["msg"] == msg && (keep == nil || keep(e)) {
			out = append(out, e)
		}
	}
	return out
}

// durations returns the durations the entries logged under key.
func (l logged) durations(key string) *Latency {
	lat := &Latency{}
	for _, e := range l {
		if d, err := time.ParseDuration(e[key]); err == nil {
			lat.add(d)
		}
	}
	return lat
}

// p50s describes the median of each of keys over the entries, in ms:
// "load 120 ms, identity 31.2 ms"; keys never logged are left out.
func (l logged) p50s(keys ...string) string {
	var parts []string
	for _, k := range keys {
		if lat := l.durations(k); len(lat.Samples) > 0 {
			parts = append(parts, fmt.Sprintf("%s %s ms", k, num(ms(lat.Quantile(0.5)))))
		}
	}
	return strings.Join(parts, ", ")
}
