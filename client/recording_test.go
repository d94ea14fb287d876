package client

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRecordings(t *testing.T) {
	api := newFakeAPI()
	api.add(SandboxInfo{ID: "isb1"})
	ts := httptest.NewServer(api)
	defer ts.Close()
	c, err := New(Config{APIURL: ts.URL, APIKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	const id, path = "rec-0123456789abcdef", "/home/user/recordings/rec-0123456789abcdef.mp4"

	rec, err := c.StartRecording(t.Context(), "isb1", "mp4", 4500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&Recording{ID: id, Path: path}, rec); diff != "" {
		t.Errorf("started (-want +got):\n%s", diff)
	}
	if got := api.last(); got.Method != "POST" || got.Path != "/sandboxes/isb1/recordings" || got.Body != `{"format":"mp4","durationSeconds":5}` {
		t.Errorf("sent %s %s %s", got.Method, got.Path, got.Body)
	}
	if _, err := c.StartRecording(t.Context(), "isb1", "webm", 0); err != nil {
		t.Fatal(err)
	}
	if got := api.last().Body; got != `{"format":"webm"}` {
		t.Errorf("a recording until stopped sent %s", got)
	}
	if _, err := c.StartRecording(t.Context(), "isb1", "mp4", -time.Second); err == nil {
		t.Error("a negative duration was sent")
	}

	list, err := c.ListRecordings(t.Context(), "isb1")
	if err != nil {
		t.Fatal(err)
	}
	want := &Recordings{
		InProgress: []RecordingInProgress{{ID: id, Path: path, AwaitingDisplay: true}},
		Files:      []RecordingFile{{Path: "/home/user/recordings/rec-fedcba9876543210.webm", SizeBytes: 52311}},
	}
	if diff := cmp.Diff(want, list); diff != "" {
		t.Errorf("listed (-want +got):\n%s", diff)
	}
	if got := api.last(); got.Method != "GET" || got.Path != "/sandboxes/isb1/recordings" {
		t.Errorf("sent %s %s", got.Method, got.Path)
	}

	stopped, err := c.StopRecording(t.Context(), "isb1", id)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&Recording{ID: id, Path: path, SizeBytes: 1234}, stopped); diff != "" {
		t.Errorf("stopped (-want +got):\n%s", diff)
	}
	if _, err := c.ListRecordings(t.Context(), "nope"); err == nil {
		t.Error("the recordings of an unknown sandbox listed")
	}
}
