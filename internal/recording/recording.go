// Package recording records a sandbox's X display to a video file in the
// sandbox, with ffmpeg's x11grab: Start launches ffmpeg detached from the
// command that started it (its own session, so it outlives that command),
// Stop interrupts it so that it finishes the file, which the files API
// then serves like any other.
//
// The server keeps no state: a recording is its ID, the name of a pid
// file in the sandbox, so recordings survive a server restart and a
// sandbox's pause.
package recording

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
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
	"mp4":  {"-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"},
	"webm": {"-c:v", "libvpx", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "1M"},
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
	// SizeBytes is the finished file's size (Stop only).
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

// startScript starts ffmpeg in a session of its own, writes its pid file
// and the output's path beside it (Stop finds a recording that ended by
// its length there) and checks a moment later that it still runs (a
// display that is not there ends it at once), printing its errors if not.
// $1 is the output, $2 the pid file, $3 the display, then ffmpeg's output
// arguments.
const startScript = `set -e
out=$1 pidfile=$2 display=$3; shift 3
mkdir -p "$(dirname "$out")" "$(dirname "$pidfile")"
setsid ffmpeg -nostdin -loglevel error -f x11grab -framerate ` + "%d" + ` -i "$display" "$@" -y "$out" </dev/null >/dev/null 2>"$pidfile.log" &
echo $! >"$pidfile"
echo "$out" >"$pidfile.out"
sleep 0.5
if ! kill -0 "$(cat "$pidfile")" 2>/dev/null && [ ! -s "$out" ]; then cat "$pidfile.log" >&2; rm -f "$pidfile" "$pidfile.out"; exit 1; fi`

// Start starts recording the display in format ("mp4" or "webm"); with a
// duration (at most MaxDuration), ffmpeg ends the recording by itself
// after that much video, and Stop then only reports it.
func (r *Recorder) Start(ctx context.Context, format string, duration time.Duration) (Recording, error) {
	enc, ok := formats[format]
	if !ok {
		return Recording{}, &InputError{"format", fmt.Sprintf("want mp4 or webm, got %q", format)}
	}
	if duration < 0 || duration > MaxDuration {
		return Recording{}, &InputError{"durationSeconds", fmt.Sprintf("want 0 (until stopped) to %d seconds, got %v", int(MaxDuration.Seconds()), duration.Seconds())}
	}
	var b [8]byte
	rand.Read(b[:])
	rec := Recording{ID: "rec-" + hex.EncodeToString(b[:])}
	rec.Path = Dir + "/" + rec.ID + "." + format
	args := append([]string{"sh", "-c", fmt.Sprintf(startScript, FrameRate), "sh", rec.Path, pidFile(rec.ID), r.display}, enc...)
	if duration > 0 {
		args = append(args, "-t", strconv.FormatFloat(duration.Seconds(), 'f', -1, 64))
	}
	if _, err := r.run(ctx, args...); err != nil {
		return Recording{}, fmt.Errorf("starting ffmpeg: %w", err)
	}
	return rec, nil
}

// stopScript interrupts the ffmpeg of pid file $1 if it still runs (the
// pid is its only while its command line ends in the output's path: a
// recording that ended by its length leaves a pid another process may
// get), waits up to 30 s for it to finish the file and exit, and prints
// the path and size of what it wrote. It exits 3 when there is no such
// recording.
const stopScript = `pidfile=$1
[ -f "$pidfile" ] && [ -f "$pidfile.out" ] || exit 3
pid=$(cat "$pidfile") out=$(cat "$pidfile.out")
ours() { [ "$(tr '\0' '\n' </proc/$pid/cmdline 2>/dev/null | tail -n 1)" = "$out" ]; }
if ours; then kill -INT "$pid" 2>/dev/null || true; fi
i=0
while ours; do
  i=$((i+1)); if [ $i -gt 300 ]; then kill -KILL "$pid"; echo "ffmpeg did not finish within 30 s" >&2; exit 1; fi
  sleep 0.1
done
rm -f "$pidfile" "$pidfile.log" "$pidfile.out"
echo "$out"; stat -c %s "$out"`

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
