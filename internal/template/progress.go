package template

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Event is one progress update within a build stage.
type Event struct {
	// Phase is what the stage is doing: "preparing", "downloading",
	// "extracting", "installing", "configuring", "done".
	Phase string
	// Done and Total count packages or steps; Total is 0 when unknown.
	Done, Total int
	// Percent is the stage's completion in [0,100], or -1 when unknown.
	Percent float64
	// Item is the package or step being worked on, if any.
	Item string
}

// debootstrapProgress turns debootstrap's "I: ..." lines into events. The
// package count is only known once the downloads are done (debootstrap does
// not print it), so downloading reports a count without a total.
type debootstrapProgress struct {
	pkgs      int // packages validated (each is downloaded once)
	extracted int
	installed int // "Unpacking x" and "Configuring x" lines, two per package
	last      Event
}

// line parses one line of debootstrap's standard output. ok is false for
// lines that carry no progress (warnings, blank lines). Informational lines
// it does not know keep the current phase.
func (d *debootstrapProgress) line(s string) (ev Event, ok bool) {
	msg, found := strings.CutPrefix(strings.TrimSpace(s), "I: ")
	if !found {
		return Event{}, false
	}
	verb, rest, _ := strings.Cut(msg, " ")
	rest = strings.TrimSpace(rest)
	switch verb {
	case "Retrieving", "Validating":
		name, version, _ := strings.Cut(rest, " ")
		if version == "" {
			// The Release file and package indices, not a package.
			return d.set(Event{Phase: "preparing", Percent: -1, Item: name}), true
		}
		if verb == "Validating" {
			d.pkgs++
		}
		return d.set(Event{Phase: "downloading", Done: d.pkgs, Percent: -1, Item: name}), true
	case "Extracting":
		d.extracted++
		return d.counted("extracting", d.extracted, d.pkgs, rest), true
	case "Unpacking", "Configuring":
		if isGroupLine(rest) {
			// "Unpacking required packages...", "Configuring the base system..."
			return d.counted("installing", d.installed, 2*d.pkgs, ""), true
		}
		d.installed++
		return d.counted("installing", d.installed, 2*d.pkgs, rest), true
	case "Installing":
		return d.counted("installing", d.installed, 2*d.pkgs, ""), true
	case "Base":
		if strings.HasPrefix(rest, "system installed") {
			return d.set(Event{Phase: "done", Done: d.pkgs, Total: d.pkgs, Percent: 100}), true
		}
	}
	if d.last.Phase == "" {
		return d.set(Event{Phase: "preparing", Percent: -1}), true
	}
	return d.last, true
}

func (d *debootstrapProgress) set(ev Event) Event {
	d.last = ev
	return ev
}

func isGroupLine(rest string) bool {
	return strings.HasSuffix(rest, "packages...") || strings.HasPrefix(rest, "the base system")
}

func (d *debootstrapProgress) counted(phase string, done, total int, item string) Event {
	item = strings.TrimSuffix(item, "...")
	item, _, _ = strings.Cut(item, ":") // "zlib1g:amd64"
	pct := -1.0
	if total > 0 {
		pct = min(100, 100*float64(done)/float64(total))
	}
	return d.set(Event{Phase: phase, Done: done, Total: total, Percent: pct, Item: item})
}

// aptProgress turns apt-get's output into events: the package count from
// its summary line "0 upgraded, 415 newly installed, 0 to remove and 0 not
// upgraded.", then "Get:N" while downloading, then dpkg's "Unpacking x"
// and "Setting up x" while installing.
type aptProgress struct {
	total    int // packages to install
	unpacked int // "Unpacking x" lines
	setUp    int // "Setting up x" lines
}

// line converts one output line; ok is false for lines that carry no
// progress.
func (a *aptProgress) line(s string) (ev Event, ok bool) {
	var up, n int
	if _, err := fmt.Sscanf(s, "%d upgraded, %d newly installed", &up, &n); err == nil {
		a.total = n
		return Event{}, false
	}
	var i int
	if _, err := fmt.Sscanf(s, "Get:%d ", &i); err == nil && a.total > 0 {
		return Event{Phase: "downloading", Done: min(i, a.total), Total: a.total, Percent: 100 * float64(min(i, a.total)) / float64(a.total)}, true
	}
	var item string
	switch {
	case strings.HasPrefix(s, "Unpacking "):
		a.unpacked++
		item = strings.Fields(s)[1]
	case strings.HasPrefix(s, "Setting up "):
		a.setUp++
		item = strings.Fields(s)[2]
	default:
		return Event{}, false
	}
	// dpkg unpacks and configures in interleaved batches; half the sum
	// counts packages monotonically, reaching the total at the end.
	done := (a.unpacked + a.setUp) / 2
	ev = Event{Phase: "installing", Done: done, Total: a.total, Percent: -1, Item: item}
	if a.total > 0 {
		ev.Done = min(done, a.total)
		ev.Percent = 100 * float64(ev.Done) / float64(a.total)
	}
	return ev, true
}

// reporter renders build progress. On a terminal it redraws one line with
// a bar; otherwise it prints one plain line per stage and phase. It is safe
// for concurrent use.
type reporter struct {
	mu       sync.Mutex // guards every field below
	w        io.Writer  // nil: no output
	tty      bool
	width    int
	name     string
	stage    string
	stageNo  int
	stages   int
	ev       Event
	lastKey  string
	lastDraw time.Time
	drawn    bool
	hook     func(stage string, ev Event)
}

func newReporter(w io.Writer, name string, stages int, hook func(string, Event)) *reporter {
	r := &reporter{w: w, name: name, stages: stages, hook: hook, width: 80}
	if w != nil {
		r.tty, r.width = terminalWidth(w)
	}
	return r
}

// startStage begins the next stage.
func (r *reporter) startStage(stage string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stage = stage
	r.stageNo++
	r.ev = Event{Phase: "", Percent: -1}
	r.emit(true)
}

// update records ev for the current stage.
func (r *reporter) update(ev Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	force := ev.Phase != r.ev.Phase
	r.ev = ev
	r.emit(force)
}

// finish ends the progress display with a final line.
func (r *reporter) finish(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w == nil {
		return
	}
	if r.tty && r.drawn {
		fmt.Fprint(r.w, "\r\x1b[K")
	}
	fmt.Fprintf(r.w, "template %s: %s\n", r.name, msg)
	r.drawn = false
}

func (r *reporter) emit(force bool) {
	if r.hook != nil {
		r.hook(r.stage, r.ev)
	}
	if r.w == nil {
		return
	}
	if !r.tty {
		key := r.stage + "/" + r.ev.Phase
		if key == r.lastKey {
			return
		}
		r.lastKey = key
		fmt.Fprintln(r.w, r.plainLine())
		return
	}
	now := time.Now()
	if !force && now.Sub(r.lastDraw) < 100*time.Millisecond {
		return
	}
	r.lastDraw = now
	fmt.Fprint(r.w, "\r\x1b[K"+r.ttyLine())
	r.drawn = true
}

func (r *reporter) prefix() string {
	return fmt.Sprintf("template %s [%d/%d] %s", r.name, r.stageNo, r.stages, r.stage)
}

func (r *reporter) plainLine() string {
	s := r.prefix()
	if r.ev.Phase != "" {
		s += ": " + r.ev.Phase
	}
	if r.ev.Total > 0 && r.ev.Phase != "done" {
		s += fmt.Sprintf(" (%d)", r.ev.Total)
	}
	return s
}

const barWidth = 24

func (r *reporter) ttyLine() string {
	parts := []string{r.prefix()}
	if r.ev.Percent >= 0 {
		n := int(r.ev.Percent / 100 * barWidth)
		parts = append(parts, "["+strings.Repeat("#", n)+strings.Repeat("-", barWidth-n)+"]",
			fmt.Sprintf("%3.0f%%", r.ev.Percent))
	}
	if r.ev.Phase != "" {
		parts = append(parts, r.ev.Phase)
	}
	switch {
	case r.ev.Total > 0:
		parts = append(parts, fmt.Sprintf("%d/%d", r.ev.Done, r.ev.Total))
	case r.ev.Done > 0:
		parts = append(parts, strconv.Itoa(r.ev.Done))
	}
	if r.ev.Item != "" {
		parts = append(parts, r.ev.Item)
	}
	s := strings.Join(parts, " ")
	if r.width > 1 && len(s) >= r.width {
		s = s[:r.width-1]
	}
	return s
}

// lineWriter splits what is written to it into lines and hands each to fn.
// exec's copying goroutine is its only writer.
type lineWriter struct {
	fn  func(string)
	buf []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.fn(strings.TrimRight(string(w.buf[:i]), "\r"))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 64<<10 { // a runaway line without newline
		w.fn(string(w.buf))
		w.buf = w.buf[:0]
	}
	return len(p), nil
}

// flush hands over a final unterminated line.
func (w *lineWriter) flush() {
	if len(w.buf) > 0 {
		w.fn(string(w.buf))
		w.buf = nil
	}
}

// tail keeps the last n lines it was given, for error messages.
type tail struct {
	mu    sync.Mutex // guards lines
	n     int
	lines []string
}

func (t *tail) add(s string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if strings.TrimSpace(s) == "" {
		return
	}
	t.lines = append(t.lines, s)
	if len(t.lines) > t.n {
		t.lines = t.lines[len(t.lines)-t.n:]
	}
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}
