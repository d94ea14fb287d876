package jupyter

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// protocolVersion is the messaging protocol version this package speaks.
const protocolVersion = "5.3"

// delimiter separates the routing identities from the message proper.
var delimiter = []byte("<IDS|MSG>")

// errBadSignature marks a message whose HMAC does not match; it is dropped.
var errBadSignature = errors.New("bad message signature")

// Message is a decoded message.
type Message struct {
	Header       Header
	ParentHeader Header
	Metadata     map[string]any
	Content      json.RawMessage
	Buffers      [][]byte
}

// Header is a message header (also used as the parent header).
type Header struct {
	MsgID    string `json:"msg_id"`
	Session  string `json:"session"`
	Username string `json:"username"`
	Date     string `json:"date"`
	MsgType  string `json:"msg_type"`
	Version  string `json:"version"`
}

// signer signs and verifies the four JSON frames with HMAC-SHA256.
type signer struct{ key []byte }

func (s signer) sign(frames [][]byte) []byte {
	mac := hmac.New(sha256.New, s.key)
	for _, f := range frames {
		mac.Write(f)
	}
	sum := mac.Sum(nil)
	out := make([]byte, hex.EncodedLen(len(sum)))
	hex.Encode(out, sum)
	return out
}

// encode returns the frames of a request of type msgType with a new msg_id
// and no parent, and that msg_id.
func (s signer) encode(session, msgType string, content any) ([][]byte, string, error) {
	h := Header{
		MsgID:    newID(),
		Session:  session,
		Username: "agent-sandbox",
		Date:     time.Now().UTC().Format("2006-01-02T15:04:05.000000Z"),
		MsgType:  msgType,
		Version:  protocolVersion,
	}
	header, err := json.Marshal(h)
	if err != nil {
		return nil, "", fmt.Errorf("encoding %s header: %w", msgType, err)
	}
	body, err := json.Marshal(content)
	if err != nil {
		return nil, "", fmt.Errorf("encoding %s content: %w", msgType, err)
	}
	// An absent parent and empty metadata are empty dicts on the wire.
	jsonFrames := [][]byte{header, []byte("{}"), []byte("{}"), body}
	frames := append([][]byte{delimiter, s.sign(jsonFrames)}, jsonFrames...)
	return frames, h.MsgID, nil
}

// decode parses the frames of a received message, after any routing
// identities (or the PUB topic), and checks their signature.
func (s signer) decode(frames [][]byte) (Message, error) {
	i := 0
	for i < len(frames) && !bytes.Equal(frames[i], delimiter) {
		i++
	}
	rest := frames[min(i+1, len(frames)):]
	if i == len(frames) || len(rest) < 5 {
		return Message{}, fmt.Errorf("decoding message: %d frames, no delimiter or too few after it", len(frames))
	}
	sig, jsonFrames := rest[0], rest[1:5]
	if !hmac.Equal(sig, s.sign(jsonFrames)) {
		return Message{}, errBadSignature
	}
	var m Message
	if err := json.Unmarshal(jsonFrames[0], &m.Header); err != nil {
		return Message{}, fmt.Errorf("decoding header: %w", err)
	}
	if err := json.Unmarshal(jsonFrames[1], &m.ParentHeader); err != nil {
		return Message{}, fmt.Errorf("decoding %s parent header: %w", m.Header.MsgType, err)
	}
	if err := json.Unmarshal(jsonFrames[2], &m.Metadata); err != nil {
		return Message{}, fmt.Errorf("decoding %s metadata: %w", m.Header.MsgType, err)
	}
	m.Content = json.RawMessage(jsonFrames[3])
	if len(rest) > 5 {
		m.Buffers = rest[5:]
	}
	return m, nil
}

// newID returns 128 random bits in hex, the shape of a Jupyter uuid4 hex.
func newID() string {
	b := make([]byte, 16)
	rand.Read(b) // never fails (crypto/rand panics rather)
	return hex.EncodeToString(b)
}
