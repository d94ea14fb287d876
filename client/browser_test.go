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

// TestBrowser checks the wire shape of Client.Browser: the action with
// only the fields set, the answer decoded (data from base64), and an error
// body turned into an *APIError.
func TestBrowser(t *testing.T) {
	var got map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/sandboxes/sb1/browser/actions" || r.Header.Get("X-API-Key") != "k" {
			t.Errorf("request %s %s (key %q)", r.Method, r.URL.Path, r.Header.Get("X-API-Key"))
		}
		body, _ := io.ReadAll(r.Body)
		got = nil
		json.Unmarshal(body, &got)
		if got["action"] == "press" {
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"code":400,"message":"key: \"Hyper\" is not one character or a key name"}`)
			return
		}
		io.WriteString(w, `{"mimeType":"image/png","data":"iVBORw==","tree":{"ref":"e1","role":"RootWebArea","children":[{"ref":"e9","role":"button","name":"Send"}]}}`)
	}))
	defer srv.Close()
	c, err := New(Config{APIURL: srv.URL, APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	x, y := 5.0, 0.0
	res, err := c.Browser(context.Background(), "sb1", BrowserAction{Action: "click", X: &x, Y: &y})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]any{"action": "click", "x": 5.0, "y": 0.0}, got); diff != "" {
		t.Errorf("sent (-want +got):\n%s", diff)
	}
	want := BrowserResult{MimeType: "image/png", Data: []byte{0x89, 'P', 'N', 'G'},
		Tree: &BrowserNode{Ref: "e1", Role: "RootWebArea", Children: []*BrowserNode{{Ref: "e9", Role: "button", Name: "Send"}}}}
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("answer (-want +got):\n%s", diff)
	}

	_, err = c.Browser(context.Background(), "sb1", BrowserAction{Action: "press", Key: "Hyper"})
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest {
		t.Errorf("press = %v, want the 400 as an *APIError", err)
	}
}

// TestDesktopScreenshot checks the wire shape of Client.DesktopScreenshot:
// an Anthropic screenshot action at the size asked for, and the PNG of its
// tool_result.
func TestDesktopScreenshot(t *testing.T) {
	var got map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/sandboxes/sb1/computer-use/anthropic" {
			t.Errorf("request %s %s", r.Method, r.URL.Path)
		}
		body, _ := io.ReadAll(r.Body)
		got = nil
		json.Unmarshal(body, &got)
		io.WriteString(w, `{"type":"tool_result","tool_use_id":"screenshot","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw=="}}]}`)
	}))
	defer srv.Close()
	c, err := New(Config{APIURL: srv.URL, APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	png, err := c.DesktopScreenshot(context.Background(), "sb1", 800, 600)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"tool":     map[string]any{"type": "computer_20250124", "name": "computer", "display_width_px": 800.0, "display_height_px": 600.0},
		"tool_use": map[string]any{"type": "tool_use", "id": "screenshot", "name": "computer", "input": map[string]any{"action": "screenshot"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("sent (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]byte{0x89, 'P', 'N', 'G'}, png); diff != "" {
		t.Errorf("PNG (-want +got):\n%s", diff)
	}
}
