package recording

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// exitError is a command that exited code.
type exitError int

func (e exitError) Error() string { return "exited" }
func (e exitError) ExitCode() int { return int(e) }

func TestStart(t *testing.T) {
	var ran []string
	r := New(func(_ context.Context, args ...string) ([]byte, error) {
		ran = args
		return nil, nil
	}, ":0")
	rec, err := r.Start(t.Context(), "webm", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !idFormat.MatchString(rec.ID) || rec.Path != Dir+"/"+rec.ID+".webm" {
		t.Errorf("recording %+v", rec)
	}
	// sh -c script sh <out> <pidfile> <check> recordScript sh <socket>
	// <ffmpeg's arguments…, ending in the output>: nothing of the request
	// reaches a script's text. Without a socket it does not wait for the
	// display, and it checks that ffmpeg got going.
	if got := strings.Join(ran[3:7], " "); got != "sh "+rec.Path+" "+pidFile(rec.ID)+" 1" {
		t.Errorf("arguments %q", got)
	}
	if ran[7] != recordScript || ran[8] != "sh" || ran[9] != "" {
		t.Errorf("record script arguments %q; want recordScript sh \"\"", ran[7:10])
	}
	if got := strings.Join(ran[len(ran)-2:], " "); got != "-y "+rec.Path {
		t.Errorf("ffmpeg's arguments end with %q; want -y and the output", got)
	}
	if !strings.Contains(strings.Join(ran, " "), "-i :0 -c:v libvpx") || strings.Contains(strings.Join(ran, " "), "-t") {
		t.Errorf("webm of display :0 without libvpx, or with a length: %q", ran)
	}
	if _, err := r.Start(t.Context(), "mp4", 5500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ran[len(ran)-4:len(ran)-2], " "); got != "-t 5.5" {
		t.Errorf("a 5.5 s recording has %q before its output; want -t 5.5", got)
	}
	var ie *InputError
	if _, err := r.Start(t.Context(), "gif", 0); !errors.As(err, &ie) || ie.Field != "format" {
		t.Errorf("Start(gif): %v; want an InputError naming format", err)
	}
	for _, d := range []time.Duration{-time.Second, MaxDuration + time.Second} {
		if _, err := r.Start(t.Context(), "mp4", d); !errors.As(err, &ie) || ie.Field != "durationSeconds" {
			t.Errorf("Start(mp4, %v): %v; want an InputError naming durationSeconds", d, err)
		}
	}
}

func TestAwait(t *testing.T) {
	var ran []string
	r := New(func(_ context.Context, args ...string) ([]byte, error) {
		ran = args
		return nil, nil
	}, ":0")
	rec, err := r.Await(t.Context(), "mp4")
	if err != nil {
		t.Fatal(err)
	}
	// Nothing to check at once: the record script waits for the display.
	if rec.Path != Dir+"/"+rec.ID+".mp4" || ran[6] != "0" || ran[7] != recordScript || ran[9] != socketPattern(":0") {
		t.Errorf("Await = %+v running %q; want the record script awaiting display :0's socket, unchecked", rec, ran[3:10])
	}
	if strings.Contains(strings.Join(ran, " "), " -t ") {
		t.Errorf("Await has a length: %q", ran)
	}
	var ie *InputError
	if _, err := r.Await(t.Context(), ""); !errors.As(err, &ie) || ie.Field != "format" {
		t.Errorf("Await(\"\"): %v; want an InputError naming format", err)
	}
}

// socketPattern matches the line of /proc/net/unix of display :0's
// socket, abstract or a file, and no other display's.
func TestSocketPattern(t *testing.T) {
	re := regexp.MustCompile(socketPattern(":0"))
	for line, want := range map[string]bool{
		"0000000000000000: 00000002 00000000 00010000 0001 01 81842 @/tmp/.X11-unix/X0":     true,
		"0000000000000000: 00000002 00000000 00010000 0001 01 81843 /tmp/.X11-unix/X0":      true,
		"0000000000000000: 00000002 00000000 00010000 0001 01 81844 @/tmp/.X11-unix/X01":    false,
		"0000000000000000: 00000002 00000000 00010000 0001 01 81845 /tmp/aX11-unix/X0":      false,
		"0000000000000000: 00000002 00000000 00010000 0001 01 81846 /home/tmp/.X11-unix/X0": false,
	} {
		if got := re.MatchString(line); got != want {
			t.Errorf("%q matches %v; want %v", line, got, want)
		}
	}
	if got := socketPattern(":1.0"); !strings.HasSuffix(got, "/X1$") {
		t.Errorf("socketPattern(:1.0) = %q; want display 1's socket", got)
	}
}

func TestList(t *testing.T) {
	const a, b = "rec-0123456789abcdef", "rec-fedcba9876543210"
	out := "R " + b + " sh " + Dir + "/" + b + ".webm\x00" +
		"R " + a + " ffmpeg " + Dir + "/" + a + ".mp4\x00" +
		"F 52311 " + Dir + "/" + a + ".mp4\x00" +
		"F 1000 " + Dir + "/old one.mp4\x00" +
		"F 7 " + Dir + "/notes.txt\x00"
	var ran []string
	r := New(func(_ context.Context, args ...string) ([]byte, error) {
		ran = args
		return []byte(out), nil
	}, ":0")
	got, err := r.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := Listing{
		InProgress: []InProgress{
			{ID: a, Path: Dir + "/" + a + ".mp4"},
			{ID: b, Path: Dir + "/" + b + ".webm", AwaitingDisplay: true},
		},
		// The file being written is the recording's, not a finished one.
		Files: []File{{Path: Dir + "/notes.txt", SizeBytes: 7}, {Path: Dir + "/old one.mp4", SizeBytes: 1000}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	if ran[len(ran)-1] != Dir {
		t.Errorf("List ran %q; want it to list %s", ran, Dir)
	}

	out = ""
	if got, err := r.List(t.Context()); err != nil || got.InProgress == nil || got.Files == nil || len(got.InProgress)+len(got.Files) != 0 {
		t.Errorf("List of nothing = %#v, %v; want empty lists (JSON [])", got, err)
	}
	out = "R ../x sh /etc/passwd\x00"
	if _, err := r.List(t.Context()); err == nil {
		t.Error("List took a recording ID that is none")
	}
}

func TestStop(t *testing.T) {
	const id = "rec-0123456789abcdef"
	for _, tc := range []struct {
		name    string
		out     string
		err     error
		want    Recording
		wantErr error
	}{
		{name: "finished", out: Dir + "/" + id + ".mp4\n52311\n", want: Recording{ID: id, Path: Dir + "/" + id + ".mp4", SizeBytes: 52311}},
		{name: "before the display came up", out: Dir + "/" + id + ".mp4\n0\n", want: Recording{ID: id, Path: Dir + "/" + id + ".mp4"}},
		{name: "unknown", err: exitError(3), wantErr: ErrUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := New(func(_ context.Context, args ...string) ([]byte, error) { return []byte(tc.out), tc.err }, ":0")
			got, err := r.Stop(t.Context(), id)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Stop: %v; want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("Stop = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	var ie *InputError
	if _, err := New(nil, ":0").Stop(t.Context(), "../etc/passwd"); !errors.As(err, &ie) || ie.Field != "recordingId" {
		t.Errorf("Stop(../etc/passwd): %v; want an InputError naming recordingId", err)
	}
}
