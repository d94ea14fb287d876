package liveview

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrExpired is a share link past its expiry.
var ErrExpired = errors.New("the live view link has expired")

// ErrInvalid is a token that is malformed, not signed by this server, or
// for another sandbox or port.
var ErrInvalid = errors.New("invalid live view token")

// claims is what a token says: the sandbox, whether it may take over
// (TakeoverPort) or only view, and until when (Unix seconds).
type claims struct {
	Sandbox  string `json:"sid"`
	Takeover bool   `json:"tko,omitempty"`
	Expires  int64  `json:"exp"`
}

// Signer signs and verifies live view tokens: base64url(claims) "."
// base64url(HMAC-SHA256(claims)). It is safe for concurrent use.
type Signer struct {
	key []byte
}

// NewSigner returns a signer with key, which must be at least 32 bytes.
func NewSigner(key []byte) (*Signer, error) {
	if len(key) < 32 {
		return nil, fmt.Errorf("live view key: %d bytes, want at least 32", len(key))
	}
	return &Signer{key: key}, nil
}

// Sign returns a token for sandbox id's live view, good until expires;
// takeover tokens open TakeoverPort as well as ViewPort.
func (s *Signer) Sign(id string, takeover bool, expires time.Time) string {
	payload, _ := json.Marshal(claims{Sandbox: id, Takeover: takeover, Expires: expires.Unix()})
	enc := base64.RawURLEncoding
	return enc.EncodeToString(payload) + "." + enc.EncodeToString(s.mac(payload))
}

// Verify checks that token opens port (ViewPort or TakeoverPort) of
// sandbox id at now: ErrExpired or ErrInvalid if not.
func (s *Signer) Verify(token, id string, port int, now time.Time) error {
	enc := base64.RawURLEncoding
	p, m, ok := strings.Cut(token, ".")
	payload, perr := enc.DecodeString(p)
	mac, merr := enc.DecodeString(m)
	if !ok || perr != nil || merr != nil || !hmac.Equal(mac, s.mac(payload)) {
		return ErrInvalid
	}
	var c claims
	if err := json.Unmarshal(payload, &c); err != nil || c.Sandbox != id {
		return ErrInvalid
	}
	if port != ViewPort && (port != TakeoverPort || !c.Takeover) {
		return ErrInvalid
	}
	if !now.Before(time.Unix(c.Expires, 0)) {
		return ErrExpired
	}
	return nil
}

func (s *Signer) mac(payload []byte) []byte {
	h := hmac.New(sha256.New, s.key)
	h.Write(payload)
	return h.Sum(nil)
}
