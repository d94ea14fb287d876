package jupyter

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSignMatchesPython(t *testing.T) {
	// hmac.new(b'secret', digestmod=hashlib.sha256) updated with the four
	// frames, as jupyter_client.session signs.
	const want = "891f1d698842c1c8000a13c5fd79be20dd4782e8d07c8c77cfe6e35a9b3140c5"
	got := signer{key: []byte("secret")}.sign([][]byte{[]byte(`{"msg_id":"1"}`), []byte("{}"), []byte("{}"), []byte(`{"a":1}`)})
	if string(got) != want {
		t.Errorf("sign = %s, want %s", got, want)
	}
}

func TestDecode(t *testing.T) {
	s := signer{key: []byte("secret")}
	frames, id, err := s.encode("session", "execute_request", map[string]int{"a": 1})
	if err != nil {
		t.Fatal(err)
	}
	// What a kernel sends back: the parent is our request, after routing
	// identities (or a PUB topic), with a buffer.
	var req Message
	if req, err = s.decode(frames); err != nil {
		t.Fatalf("decoding our own request: %v", err)
	}
	parent, _ := json.Marshal(req.Header)
	jsonFrames := [][]byte{[]byte(`{"msg_id":"r","msg_type":"execute_reply"}`), parent, []byte(`{"k":"v"}`), []byte(`{"status":"ok"}`)}
	reply := append([][]byte{[]byte("identity"), delimiter, s.sign(jsonFrames)}, jsonFrames...)
	reply = append(reply, []byte("buffer"))

	got, err := s.decode(reply)
	if err != nil {
		t.Fatal(err)
	}
	want := Message{
		Header:       Header{MsgID: "r", MsgType: "execute_reply"},
		ParentHeader: req.Header,
		Metadata:     map[string]any{"k": "v"},
		Content:      json.RawMessage(`{"status":"ok"}`),
		Buffers:      [][]byte{[]byte("buffer")},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decode (-want +got):\n%s", diff)
	}
	if got.ParentHeader.MsgID != id || got.ParentHeader.Version != "5.3" || got.ParentHeader.Session != "session" {
		t.Errorf("parent header = %+v, want msg_id %s, session, version 5.3", got.ParentHeader, id)
	}

	reply[len(reply)-2] = []byte(`{"status":"error"}`)
	if _, err := s.decode(reply); !errors.Is(err, errBadSignature) {
		t.Errorf("decoding a tampered message: %v, want errBadSignature", err)
	}
	if _, err := s.decode(reply[:4]); err == nil {
		t.Error("decoding a truncated message succeeded")
	}
}
