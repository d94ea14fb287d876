package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestLifecycleCalls checks what Fork, CreateSnapshot, DeleteSnapshot,
// Pause and IsRunning send and how they read the answers.
func TestLifecycleCalls(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got = append(got, r.Method+" "+r.URL.EscapedPath()+" "+string(body))
		switch r.URL.Path {
		case "/sandboxes/isrc/fork":
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `[{"sandbox":{"sandboxID":"ikid","envdAccessToken":"t"},"mode":"filesystem"},{"error":{"code":429,"message":"full"}}]`)
		case "/sandboxes/isrc/snapshots":
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"snapshotID":"snap:v1","names":["snap"],"mode":"filesystem"}`)
		case "/templates/snap:v1", "/sandboxes/isrc/pause":
			w.WriteHeader(http.StatusNoContent)
		case "/health":
			if r.Header.Get("E2b-Sandbox-Id") == "ipaused" {
				w.WriteHeader(http.StatusBadGateway)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		default:
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(map[string]any{"code": 404, "message": "nope"})
		}
	}))
	defer srv.Close()
	c, err := New(Config{APIURL: srv.URL, SandboxURL: srv.URL, APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	forks, errs, mode, err := c.Fork(ctx, "isrc", ForkOptions{Count: 2})
	if err != nil || len(forks) != 2 || forks[0].ID != "ikid" || forks[1] != nil || errs[0] != nil || mode != "filesystem" {
		t.Fatalf("Fork = %v, %v, %q, %v", forks, errs, mode, err)
	}
	var apiErr *APIError
	if !errors.As(errs[1], &apiErr) || apiErr.Status != 429 {
		t.Errorf("the failed fork's error: %v", errs[1])
	}
	snap, err := c.CreateSnapshot(ctx, "isrc", "snap:v1")
	if err != nil || snap.ID != "snap:v1" {
		t.Fatalf("CreateSnapshot = %+v, %v", snap, err)
	}
	if err := c.DeleteSnapshot(ctx, snap.ID); err != nil {
		t.Error(err)
	}
	if err := c.DeleteSnapshot(ctx, "gone:default"); !errors.Is(err, ErrNotFound) {
		t.Errorf("DeleteSnapshot of an unknown one: %v", err)
	}
	if err := c.Pause(ctx, "isrc", false); err != nil {
		t.Error(err)
	}
	if ok, err := forks[0].IsRunning(ctx); !ok || err != nil {
		t.Errorf("IsRunning = %v, %v", ok, err)
	}
	if ok, err := c.newSandbox(sandboxWire{SandboxID: "ipaused"}).IsRunning(ctx); ok || err != nil {
		t.Errorf("IsRunning of a paused one = %v, %v", ok, err)
	}
	want := []string{
		`POST /sandboxes/isrc/fork {"count":2}`,
		`POST /sandboxes/isrc/snapshots {"name":"snap:v1"}`,
		`DELETE /templates/snap:v1 `,
		`DELETE /templates/gone:default `,
		`POST /sandboxes/isrc/pause {"memory":false}`,
		`GET /health `,
		`GET /health `,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("requests (-want +got):\n%s", d)
	}
}
