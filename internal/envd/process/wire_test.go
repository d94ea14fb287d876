package process

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestWire checks the bytes an SDK sees (spec §3.1, §3.3), without the
// generated client in between: JSON envelopes, camelCase names, oneofs
// without wrappers, base64 bytes and the end-of-stream frame.
func TestWire(t *testing.T) {
	t.Parallel()
	h := newHarness(t)

	body := `{"process":{"cmd":"/bin/sh","args":["-c","echo hi; exit 1"],"cwd":"/tmp"},"stdin":false}`
	frame := make([]byte, 5, 5+len(body))
	binary.BigEndian.PutUint32(frame[1:], uint32(len(body)))
	req, err := http.NewRequestWithContext(t.Context(), "POST", h.url+"/process.Process/Start", bytes.NewReader(append(frame, body...)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("status %d, content type %q", res.StatusCode, res.Header.Get("Content-Type"))
	}

	var flags []byte
	var msgs []any
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(res.Body, hdr[:]); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("reading envelope: %v", err)
		}
		payload := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
		if _, err := io.ReadFull(res.Body, payload); err != nil {
			t.Fatalf("reading envelope payload: %v", err)
		}
		var m any
		if err := json.Unmarshal(payload, &m); err != nil {
			t.Fatalf("envelope %q is not JSON: %v", payload, err)
		}
		flags, msgs = append(flags, hdr[0]), append(msgs, m)
	}
	if len(msgs) < 3 {
		t.Fatalf("got %d envelopes %v, want start, data, end and trailer", len(msgs), msgs)
	}
	start := msgs[0].(map[string]any)["event"].(map[string]any)["start"].(map[string]any)
	pid := start["pid"]
	want := []any{
		map[string]any{"event": map[string]any{"start": map[string]any{"pid": pid}}},
		map[string]any{"event": map[string]any{"data": map[string]any{"stdout": "aGkK"}}},
		map[string]any{"event": map[string]any{"end": map[string]any{"exitCode": 1.0, "exited": true, "status": "exit status 1", "error": "exit status 1"}}},
		map[string]any{},
	}
	if diff := cmp.Diff(want, msgs); diff != "" {
		t.Errorf("envelopes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]byte{0, 0, 0, 2}, flags); diff != "" {
		t.Errorf("envelope flags (-want +got):\n%s", diff)
	}

	// A unary error is a non-200 status with a JSON body.
	req, err = http.NewRequestWithContext(t.Context(), "POST", h.url+"/process.Process/SendSignal",
		strings.NewReader(`{"process":{"pid":999999999},"signal":"SIGNAL_SIGKILL"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var got map[string]any
	if err := json.NewDecoder(res.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	wantErr := map[string]any{"code": "not_found", "message": "process with pid 999999999 not found"}
	if res.StatusCode != http.StatusNotFound || !cmp.Equal(wantErr, got) {
		t.Errorf("SendSignal of an unknown pid = %d %v, want 404 %v", res.StatusCode, got, wantErr)
	}
}
