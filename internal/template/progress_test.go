package template

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDebootstrapLine(t *testing.T) {
	// Lines as debootstrap 1.0.128 prints them; the state before each line
	// is 90 packages downloaded.
	tests := []struct {
		line string
		want Event
		ok   bool
	}{
		{"I: Retrieving InRelease ", Event{Phase: "preparing", Percent: -1, Item: "InRelease"}, true},
		{"I: Checking Release signature", Event{Phase: "preparing", Percent: -1}, true},
		{"I: Valid Release signature (key id 4D64FEC119C2029067D6E791F8D2585B8783D481)", Event{Phase: "preparing", Percent: -1}, true},
		{"I: Chosen extractor for .deb packages: dpkg-deb", Event{Phase: "preparing", Percent: -1}, true},
		{"I: Validating Packages ", Event{Phase: "preparing", Percent: -1, Item: "Packages"}, true},
		{"I: Resolving dependencies of required packages...", Event{Phase: "preparing", Percent: -1}, true},
		{"I: Checking component main on http://deb.debian.org/debian...", Event{Phase: "preparing", Percent: -1}, true},
		{"I: Retrieving adduser 3.134", Event{Phase: "downloading", Done: 90, Percent: -1, Item: "adduser"}, true},
		{"I: Validating adduser 3.134", Event{Phase: "downloading", Done: 91, Percent: -1, Item: "adduser"}, true},
		{"I: Extracting libc6...", Event{Phase: "extracting", Done: 1, Total: 90, Percent: 100.0 / 90, Item: "libc6"}, true},
		{"I: Installing core packages...", Event{Phase: "installing", Total: 180, Percent: 0}, true},
		{"I: Unpacking required packages...", Event{Phase: "installing", Total: 180, Percent: 0}, true},
		{"I: Unpacking zlib1g:amd64...", Event{Phase: "installing", Done: 1, Total: 180, Percent: 100.0 / 180, Item: "zlib1g"}, true},
		{"I: Configuring the base system...", Event{Phase: "installing", Total: 180, Percent: 0}, true},
		{"I: Configuring libc-bin...", Event{Phase: "installing", Done: 1, Total: 180, Percent: 100.0 / 180, Item: "libc-bin"}, true},
		{"I: Base system installed successfully.", Event{Phase: "done", Done: 90, Total: 90, Percent: 100}, true},
		{"W: Failure while configuring base packages.  This will be re-attempted up to five times.", Event{}, false},
		{"E: Couldn't find these debs: nosuchpkg", Event{}, false},
		{"", Event{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			d := debootstrapProgress{pkgs: 90}
			got, ok := d.line(tt.line)
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v", ok, tt.ok)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("event (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDebootstrapCapture replays a whole captured minbase run.
func TestDebootstrapCapture(t *testing.T) {
	f, err := os.Open("testdata/debootstrap-minbase.log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var d debootstrapProgress
	var phases []string
	lastPct := -1.0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		ev, ok := d.line(sc.Text())
		if !ok {
			continue
		}
		if len(phases) == 0 || phases[len(phases)-1] != ev.Phase {
			phases = append(phases, ev.Phase)
			lastPct = -1
		}
		if ev.Percent > 100 {
			t.Errorf("%q: percent %v > 100", sc.Text(), ev.Percent)
		}
		if ev.Percent < lastPct {
			t.Errorf("%q: installing went back from %v to %v", sc.Text(), lastPct, ev.Percent)
		}
		lastPct = ev.Percent
	}
	want := []string{"preparing", "downloading", "extracting", "installing", "done"}
	if diff := cmp.Diff(want, phases); diff != "" {
		t.Errorf("phases (-want +got):\n%s", diff)
	}
	if d.pkgs != 88 {
		t.Errorf("counted %d packages, want 88", d.pkgs)
	}
	// Every package is unpacked and configured once, libc-bin configured
	// twice: the estimate of 2 lines per package is close, and capped.
	if d.installed < 2*d.pkgs || d.installed > 2*d.pkgs+2 {
		t.Errorf("counted %d unpack/configure lines, want about %d", d.installed, 2*d.pkgs)
	}
}

func TestAptProgress(t *testing.T) {
	var a aptProgress
	var got []Event
	for _, line := range []string{
		"Reading package lists...",
		"0 upgraded, 2 newly installed, 0 to remove and 0 not upgraded.",
		"Get:1 http://deb.debian.org/debian bookworm/main amd64 less amd64 590-2 [132 kB]",
		"Get:2 http://deb.debian.org/debian bookworm/main amd64 jq amd64 1.6-2.1 [135 kB]",
		"Fetched 267 kB in 0s (1200 kB/s)",
		"Unpacking less (590-2) ...",
		"Unpacking jq (1.6-2.1) ...",
		"Setting up less (590-2) ...",
		"Setting up jq (1.6-2.1) ...",
		"Processing triggers for man-db ...",
	} {
		if ev, ok := a.line(line); ok {
			got = append(got, ev)
		}
	}
	want := []Event{
		{Phase: "downloading", Done: 1, Total: 2, Percent: 50},
		{Phase: "downloading", Done: 2, Total: 2, Percent: 100},
		{Phase: "installing", Done: 0, Total: 2, Percent: 0, Item: "less"},
		{Phase: "installing", Done: 1, Total: 2, Percent: 50, Item: "jq"},
		{Phase: "installing", Done: 1, Total: 2, Percent: 50, Item: "less"},
		{Phase: "installing", Done: 2, Total: 2, Percent: 100, Item: "jq"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestReporterPlain(t *testing.T) {
	var buf bytes.Buffer
	var hooked []string
	r := newReporter(&buf, "demo", 2, func(stage string, ev Event) { hooked = append(hooked, stage+"/"+ev.Phase) })
	r.startStage("bootstrap")
	r.update(Event{Phase: "downloading", Done: 1, Percent: -1})
	r.update(Event{Phase: "downloading", Done: 2, Percent: -1})
	r.update(Event{Phase: "installing", Done: 1, Total: 180, Percent: 0.5})
	r.update(Event{Phase: "installing", Done: 2, Total: 180, Percent: 1})
	r.startStage("steps")
	r.finish("built demo-123 in 1s")
	want := `template demo [1/2] bootstrap
template demo [1/2] bootstrap: downloading
template demo [1/2] bootstrap: installing (180)
template demo [2/2] steps
template demo: built demo-123 in 1s
`
	if diff := cmp.Diff(want, buf.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	if len(hooked) != 6 {
		t.Errorf("hook saw %d events, want 6: %v", len(hooked), hooked)
	}
}

func TestReporterTTYLine(t *testing.T) {
	r := &reporter{name: "base", stage: "packages", stageNo: 2, stages: 4, width: 200,
		ev: Event{Phase: "installing", Done: 12, Total: 415, Percent: 50, Item: "nodejs"}}
	want := "template base [2/4] packages [############------------]  50% installing 12/415 nodejs"
	if got := r.ttyLine(); got != want {
		t.Errorf("ttyLine =\n%q, want\n%q", got, want)
	}
	r.width = 20
	if got := r.ttyLine(); len(got) != 19 {
		t.Errorf("ttyLine not cut to the terminal width: %q", got)
	}
}

func TestLineWriter(t *testing.T) {
	var got []string
	w := &lineWriter{fn: func(s string) { got = append(got, s) }}
	for _, chunk := range []string{"I: Retr", "ieving a 1\nI: Valid", "ating a 1\r\n\n", "tail"} {
		w.Write([]byte(chunk))
	}
	w.flush()
	want := []string{"I: Retrieving a 1", "I: Validating a 1", "", "tail"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
}

func TestCleanupOrder(t *testing.T) {
	var order []string
	var c cleanup
	c.push("first", func(context.Context) error { order = append(order, "first"); return nil })
	c.push("second", func(context.Context) error { order = append(order, "second"); return errors.New("boom") })
	c.push("third", func(context.Context) error { order = append(order, "third"); return nil })
	err := c.run(context.Background())
	if diff := cmp.Diff([]string{"third", "second", "first"}, order); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
	if err == nil || !strings.Contains(err.Error(), "second: boom") {
		t.Errorf("err = %v, want it to name the failed undo", err)
	}
	if err := c.run(context.Background()); err != nil || len(order) != 3 {
		t.Errorf("second run = %v after %d undos, want an empty stack", err, len(order))
	}
}
