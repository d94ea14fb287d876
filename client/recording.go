package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// Recordings of a sandbox's display (docs/BROWSER.md), an agent-sandbox
// extension: ffmpeg in the sandbox writes each to a file under
// /home/user/recordings, which the files API (Sandbox.ReadFile) then
// downloads.

// Recording is one recording of a sandbox's display and the file it is
// written to.
type Recording struct {
	ID   string `json:"recordingId"`
	Path string `json:"path"`
	// SizeBytes is the finished file's size, once stopped; 0 when the
	// recording ended before the display came up and wrote no file.
	SizeBytes int64 `json:"sizeBytes,omitempty"`
}

// Recordings is what a sandbox has recorded: the recordings in progress
// (a template's own, started with the sandbox, among them) and the files
// of finished ones.
type Recordings struct {
	InProgress []RecordingInProgress `json:"inProgress"`
	Files      []RecordingFile       `json:"files"`
}

// RecordingInProgress is a recording that runs: StopRecording ends it.
type RecordingInProgress struct {
	ID   string `json:"recordingId"`
	Path string `json:"path"`
	// AwaitingDisplay says it waits for the display to come up and has
	// written nothing yet.
	AwaitingDisplay bool `json:"awaitingDisplay"`
}

// RecordingFile is a file in the sandbox's recordings directory.
type RecordingFile struct {
	Path      string `json:"path"`
	SizeBytes int64  `json:"sizeBytes"`
}

// StartRecording starts recording the display of the sandbox id (a
// desktop sandbox whose display runs) in format "mp4" or "webm"; with a
// duration, rounded up to whole seconds, it ends by itself after that much
// video, otherwise when stopped. POST /sandboxes/{id}/recordings.
func (c *Client) StartRecording(ctx context.Context, id, format string, duration time.Duration) (*Recording, error) {
	if duration < 0 {
		return nil, fmt.Errorf("starting a recording of sandbox %s: duration %v is negative", id, duration)
	}
	body := struct {
		Format          string `json:"format"`
		DurationSeconds int64  `json:"durationSeconds,omitempty"`
	}{format, seconds(duration)}
	var out Recording
	_, err := c.do(ctx, apiRequest{
		method: http.MethodPost, path: "/sandboxes/" + url.PathEscape(id) + "/recordings", body: body,
		ok: []int{http.StatusCreated},
	}, &out)
	if err != nil {
		return nil, fmt.Errorf("starting a recording of sandbox %s: %w", id, err)
	}
	return &out, nil
}

// StopRecording stops the recording recordingID of the sandbox id, once
// ffmpeg has finished its file, and returns it with the file's size.
// POST /sandboxes/{id}/recordings/{recordingId}/stop.
func (c *Client) StopRecording(ctx context.Context, id, recordingID string) (*Recording, error) {
	var out Recording
	_, err := c.do(ctx, apiRequest{
		method: http.MethodPost, path: "/sandboxes/" + url.PathEscape(id) + "/recordings/" + url.PathEscape(recordingID) + "/stop",
		ok: []int{http.StatusOK},
	}, &out)
	if err != nil {
		return nil, fmt.Errorf("stopping recording %s of sandbox %s: %w", recordingID, id, err)
	}
	return &out, nil
}

// ListRecordings returns the recordings in progress in the sandbox id and
// the files of its recordings. GET /sandboxes/{id}/recordings.
func (c *Client) ListRecordings(ctx context.Context, id string) (*Recordings, error) {
	var out Recordings
	_, err := c.do(ctx, apiRequest{
		method: http.MethodGet, path: "/sandboxes/" + url.PathEscape(id) + "/recordings",
		ok: []int{http.StatusOK},
	}, &out)
	if err != nil {
		return nil, fmt.Errorf("listing the recordings of sandbox %s: %w", id, err)
	}
	return &out, nil
}
