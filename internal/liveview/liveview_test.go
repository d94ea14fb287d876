package liveview

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
)

func TestStart(t *testing.T) {
	var ran []string
	run := func(_ context.Context, args ...string) ([]byte, error) {
		ran = args
		return nil, nil
	}
	if err := Start(t.Context(), run, ":0"); err != nil {
		t.Fatal(err)
	}
	// sh -c script sh <display>: the display is an argument, not script text.
	if len(ran) != 5 || ran[0] != "sh" || ran[3] != "sh" || ran[4] != ":0" {
		t.Fatalf("ran %q", ran)
	}
	for _, want := range []string{"-viewonly -rfbport 5910", "-rfbport 5911", "6090 127.0.0.1:5910", "6091 127.0.0.1:5911"} {
		if !strings.Contains(ran[2], want) {
			t.Errorf("script lacks %q", want)
		}
	}
	failed := errors.New("exit status 1")
	if err := Start(t.Context(), func(context.Context, ...string) ([]byte, error) { return nil, failed }, ":0"); !errors.Is(err, failed) {
		t.Errorf("Start = %v, want it to wrap the run's error", err)
	}
}

func TestPagePath(t *testing.T) {
	for _, takeover := range []bool{false, true} {
		u, err := url.Parse(PagePath("a.b-c_d", takeover))
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		if u.Path != "/vnc.html" || q.Get("path") != "websockify?token=a.b-c_d" || q.Get("view_only") != map[bool]string{false: "true", true: "false"}[takeover] {
			t.Errorf("PagePath(takeover %v) = %s", takeover, u)
		}
	}
}
