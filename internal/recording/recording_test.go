package recording

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
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
	// sh -c script sh <out> <pidfile> <display> <encoder…>: nothing of the
	// request reaches the script's text.
	if got := strings.Join(ran[3:7], " "); got != "sh "+rec.Path+" "+pidFile(rec.ID)+" :0" {
		t.Errorf("arguments %q", got)
	}
	if !strings.Contains(strings.Join(ran, " "), "libvpx") || strings.Contains(strings.Join(ran, " "), "-t") {
		t.Errorf("webm without libvpx, or with a length: %q", ran)
	}
	if _, err := r.Start(t.Context(), "mp4", 5500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ran[len(ran)-2:], " "); got != "-t 5.5" {
		t.Errorf("a 5.5 s recording ends its arguments with %q; want -t 5.5", got)
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
