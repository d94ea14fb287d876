// Package recording records a sandbox's X display to a video file in the
// sandbox, with ffmpeg's x11grab: Start launches ffmpeg detached from the
// command that started it (its own session, so it outlives that command),
// Stop interrupts it so that it finishes the file, which the files API
// then serves like any other. Await is Start for a display that is not up
// yet (a template's recording, started with the sandbox: @e2b/desktop
// starts Xvfb after the create), and List finds what is recording and
// what was recorded.
//
// The server keeps no state: a recording is its ID, the name of a pid
// file in the sandbox, so recordings survive a server restart and a
// sandbox's pause.
package recording

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// RunFunc runs a program in the sandbox (as its user, DISPLAY set) and
// returns its stdout; an error when it cannot or it fails, with an
// ExitCode() int method when it ran and exited non-zero.
type RunFunc func(ctx context.Context, args ...string) ([]byte, error)

// Dir is where recordings are written in the sandbox: the user's home,
// which the files API reads.
const Dir = "/home/user/recordings"

// pidDir holds a pid file per recording in progress.
const pidDir = "/tmp/agent-sandbox-recordings"

// FrameRate is the frames per second recordings are taken at.
const FrameRate = 15

// formats are the containers a recording may be in, with the encoder
// arguments each takes: fast encoders, since the sandbox's own CPUs pay.
var formats = map[string][]string{
	// At a constant frame rate: x11grab stamps frames with the wall
	// clock and, on a starved CPU, captures late and in bursts; a late
	// frame is then repeated over its gap, and the video lasts the wall
	// time it covers (at MP4's default, a variable rate, a "5 s"
	// recording came out 4.7 s long). -vsync, not its successor
	// -fps_mode (5.1), which the ffmpeg of older templates (Ubuntu
	// 22.04's 4.4) refuses.
	"mp4": {"-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-vsync", "cfr"},
	// WebM keeps its variable rate: libvpx's realtime encoder fell
	// further behind at a constant one (more frames to encode after a
	// stall), and its recordings came out shorter still.
	"webm": {"-c:v", "libvpx", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "1M"},
}

// CheckFormat tells whether format names a container a recording may be
// in ("mp4", "webm").
func CheckFormat(format string) error {
	if _, ok := formats[format]; !ok {
		return fmt.Errorf("want mp4 or webm, got %q", format)
	}
	return nil
}

// idFormat is a recording ID.
var idFormat = regexp.MustCompile(`^rec-[0-9a-f]{16}$`)

// ErrUnknown is a recording ID that names no recording in progress.
var ErrUnknown = errors.New("no such recording in progress")

// InputError is a request the recorder refuses; Field names what is wrong.
type InputError struct{ Field, Msg string }

func (e *InputError) Error() string { return e.Field + ": " + e.Msg }

// Recording is one recording: its ID and the file it is written to.
type Recording struct {
	ID   string `json:"recordingId"`
	Path string `json:"path"`
	// SizeBytes is the finished file's size (Stop only; 0 when the
	// recording ended before its display came up and wrote no file).
	SizeBytes int64 `json:"sizeBytes,omitempty"`
}

// Recorder records one sandbox's display.
type Recorder struct {
	run     RunFunc
	display string
}

// New returns a recorder that runs its commands with run and records X
// display display (":0").
func New(run RunFunc, display string) *Recorder {
	return &Recorder{run: run, display: display}
}

// MaxDuration bounds a recording's length when one is asked for.
const MaxDuration = 24 * time.Hour

// startScript checks that ffmpeg is there, starts recordScript in a
// session of its own, writes its pid file and the output's path beside it
// (Stop finds a recording that ended by its length there) and, when $3
// is 1, checks a moment later that it still runs (a display that is not
// there ends it at once), printing its errors if not; a recording that
// awaits its display has nothing to check yet. $1 is the output, $2 the
// pid file, then recordScript's arguments; the last of them is the
// output, as is the last of ffmpeg's (Stop and List tell the recording's
// process by it).
const startScript = `set -e
out=$1 pidfile=$2 check=$3; shift 3
command -v ffmpeg >/dev/null || { echo "ffmpeg is not installed in the sandbox" >&2; exit 1; }
mkdir -p "$(dirname "$out")" "$(dirname "$pidfile")"
setsid sh -c "$@" </dev/null >/dev/null 2>"$pidfile.log" &
echo $! >"$pidfile"
echo "$out" >"$pidfile.out"
[ "$check" = 1 ] || exit 0
sleep 0.5
if ! kill -0 "$(cat "$pidfile")" 2>/dev/null && [ ! -s "$out" ]; then cat "$pidfile.log" >&2; rm -f "$pidfile" "$pidfile.out"; exit 1; fi`

// recordScript becomes ffmpeg with arguments $2…, once the X server's
// socket matching the pattern $1 is listed in /proc/net/unix when $1 is
// set: Xvfb as @e2b/desktop starts it (-nolisten unix) has only an
// abstract socket, which no file test sees. Until then it is a shell
// polling, which Stop's SIGTERM ends.
const recordScript = `if [ -n "$1" ]; then until grep -qE "$1" /proc/net/unix; do sleep 0.2; done; fi
shift
exec ffmpeg "$@"`

// Start starts recording the display in format ("mp4" or "webm"); with a
// duration (at most MaxDuration), ffmpeg ends the recording by itself
// after that much video, and Stop then only reports it. It fails when the
// display is not up.
func (r *Recorder) Start(ctx context.Context, format string, duration time.Duration) (Recording, error) {
	if duration < 0 || duration > MaxDuration {
		return Recording{}, &InputError{"durationSeconds", fmt.Sprintf("want 0 (until stopped) to %d seconds, got %v", int(MaxDuration.Seconds()), duration.Seconds())}
	}
	return r.start(ctx, format, duration, false)
}

// Await starts a recording in format that waits for the display to come
// up and then records it until stopped: nothing shown on the display is
// missed however soon after this it appears.
func (r *Recorder) Await(ctx context.Context, format string) (Recording, error) {
	return r.start(ctx, format, 0, true)
}

// start starts a recording of duration (0: until stopped) in format; with
// await, once the display is up.
func (r *Recorder) start(ctx context.Context, format string, duration time.Duration, await bool) (Recording, error) {
	if err := CheckFormat(format); err != nil {
		return Recording{}, &InputError{"format", err.Error()}
	}
	var b [8]byte
	rand.Read(b[:])
	rec := Recording{ID: "rec-" + hex.EncodeToString(b[:])}
	rec.Path = Dir + "/" + rec.ID + "." + format
	socket, check := "", "1"
	if await {
		socket, check = socketPattern(r.display), "0"
	}
	args := []string{"sh", "-c", startScript, "sh", rec.Path, pidFile(rec.ID), check,
		recordScript, "sh", socket, "-nostdin", "-loglevel", "error", "-f", "x11grab", "-framerate", strconv.Itoa(FrameRate), "-i", r.display}
	args = append(args, formats[format]...)
	if duration > 0 {
		args = append(args, "-t", strconv.FormatFloat(duration.Seconds(), 'f', -1, 64))
	}
	args = append(args, "-y", rec.Path)
	if _, err := r.run(ctx, args...); err != nil {
		return Recording{}, fmt.Errorf("starting ffmpeg: %w", err)
	}
	return rec, nil
}

// socketPattern is an extended regular expression matching the line of
// /proc/net/unix that lists the socket of X display (":0"), a file or an
// abstract one ('@').
func socketPattern(display string) string {
	n, _, _ := strings.Cut(strings.TrimPrefix(display, ":"), ".")
	return `[ @]/tmp/\.X11-unix/X` + regexp.QuoteMeta(n) + `$`
}

// oursFunc defines ours, which tells whether process $pid is the
// recording to $out: a recording that ended (by its length, or with the
// sandbox when it booted afresh) leaves a pid another process may get.
const oursFunc = `ours() { [ "$(tr '\0' '\n' </proc/$pid/cmdline 2>/dev/null | tail -n 1)" = "$out" ]; }
`

// stopScript ends the recording of pid file $1 if it still runs: SIGTERM,
// on which ffmpeg finishes its file as on SIGINT, and which ends the
// shell of a recording still waiting for its display (SIGINT cannot: an
// asynchronous command of a shell ignores it). It waits up to 30 s for
// the file to be finished and prints its path and size (0: there is no
// file, the display never came up). It exits 3 when there is no such
// recording.
const stopScript = oursFunc + `pidfile=$1
[ -f "$pidfile" ] && [ -f "$pidfile.out" ] || exit 3
pid=$(cat "$pidfile") out=$(cat "$pidfile.out")
if ours; then kill -TERM "$pid" 2>/dev/null || true; fi
i=0
while ours; do
  i=$((i+1)); if [ $i -gt 300 ]; then kill -KILL "$pid"; echo "ffmpeg did not finish within 30 s" >&2; exit 1; fi
  sleep 0.1
done
rm -f "$pidfile" "$pidfile.log" "$pidfile.out"
echo "$out"; if [ -e "$out" ]; then stat -c %s "$out"; else echo 0; fi`

// Stop stops recording id and returns it with its size; ErrUnknown when
// no such recording is in progress.
func (r *Recorder) Stop(ctx context.Context, id string) (Recording, error) {
	if !idFormat.MatchString(id) {
		return Recording{}, &InputError{"recordingId", fmt.Sprintf("%q is not a recording ID", id)}
	}
	out, err := r.run(ctx, "sh", "-c", stopScript, "sh", pidFile(id))
	var coded interface{ ExitCode() int }
	if errors.As(err, &coded) && coded.ExitCode() == 3 {
		return Recording{}, fmt.Errorf("recording %s: %w", id, ErrUnknown)
	}
	if err != nil {
		return Recording{}, fmt.Errorf("stopping ffmpeg: %w", err)
	}
	lines := strings.Fields(string(out))
	if len(lines) != 2 {
		return Recording{}, fmt.Errorf("stopping ffmpeg: unexpected answer %q", out)
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil {
		return Recording{}, fmt.Errorf("stopping ffmpeg: unexpected size %q", lines[1])
	}
	return Recording{ID: id, Path: lines[0], SizeBytes: size}, nil
}

func pidFile(id string) string { return pidDir + "/" + id + ".pid" }

// Listing is what a sandbox has recorded: the recordings in progress and
// the files in Dir, other than those being written.
type Listing struct {
	InProgress []InProgress `json:"inProgress"`
	Files      []File       `json:"files"`
}

// InProgress is a recording that runs: Stop ends it.
type InProgress struct {
	ID   string `json:"recordingId"`
	Path string `json:"path"`
	// AwaitingDisplay says that the recording waits for its display to
	// come up (Await) and has written nothing yet.
	AwaitingDisplay bool `json:"awaitingDisplay"`
}

// File is a file in Dir.
type File struct {
	Path      string `json:"path"`
	SizeBytes int64  `json:"sizeBytes"`
}

// listScript prints, NUL-terminated, "R <id> <ffmpeg|sh> <path>" for each
// recording in progress (by what its process runs now: a shell awaits its
// display) and "F <size> <path>" for each file in Dir ($1).
const listScript = oursFunc + `for pidfile in ` + pidDir + `/rec-*.pid; do
  [ -f "$pidfile" ] && [ -f "$pidfile.out" ] || continue
  pid=$(cat "$pidfile") out=$(cat "$pidfile.out")
  ours || continue
  id=${pidfile##*/}
  printf 'R %s %s %s\0' "${id%.pid}" "$(cat /proc/$pid/comm 2>/dev/null)" "$out"
done
if [ -d "$1" ]; then find "$1" -maxdepth 1 -type f -printf 'F %s %p\0'; fi`

// List returns the recordings in progress and the files in Dir, each by
// path.
func (r *Recorder) List(ctx context.Context) (Listing, error) {
	out, err := r.run(ctx, "sh", "-c", listScript, "sh", Dir)
	if err != nil {
		return Listing{}, fmt.Errorf("listing recordings: %w", err)
	}
	l := Listing{InProgress: []InProgress{}, Files: []File{}}
	writing := map[string]bool{}
	var files []File
	for line := range bytes.SplitSeq(out, []byte{0}) {
		if len(line) == 0 { // after the last record
			continue
		}
		kind, rest, _ := strings.Cut(string(line), " ")
		switch kind {
		case "R":
			f := strings.SplitN(rest, " ", 3)
			if len(f) != 3 || !idFormat.MatchString(f[0]) {
				return Listing{}, fmt.Errorf("listing recordings: unexpected answer %q", line)
			}
			l.InProgress = append(l.InProgress, InProgress{ID: f[0], Path: f[2], AwaitingDisplay: f[1] != "ffmpeg"})
			writing[f[2]] = true
		case "F":
			sz, path, _ := strings.Cut(rest, " ")
			size, err := strconv.ParseInt(sz, 10, 64)
			if err != nil || path == "" {
				return Listing{}, fmt.Errorf("listing recordings: unexpected answer %q", line)
			}
			files = append(files, File{Path: path, SizeBytes: size})
		default:
			return Listing{}, fmt.Errorf("listing recordings: unexpected answer %q", line)
		}
	}
	for _, f := range files {
		if !writing[f.Path] {
			l.Files = append(l.Files, f)
		}
	}
	slices.SortFunc(l.InProgress, func(a, b InProgress) int { return strings.Compare(a.ID, b.ID) })
	slices.SortFunc(l.Files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return l, nil
}
