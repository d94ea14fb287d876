package files

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/url"
	"strconv"
	"time"
)

// Op is what a signed /files URL allows: reading (GET) or writing (POST).
type Op string

// The operations a signature can grant.
const (
	OpRead  Op = "read"
	OpWrite Op = "write"
)

// Errors of VerifySignature. Their texts are the messages envd answers with.
var (
	ErrMissingSignature = errors.New("missing signature query parameter")
	ErrInvalidSignature = errors.New("invalid signature")
	ErrSignatureExpired = errors.New("signature is already expired")
)

// Sign returns the signature that lets a request without the access token
// perform op on path as username: "v1_" and the unpadded standard base64 of
// SHA-256("<path>:<op>:<username>:<token>[:<expiration>]"). path and username
// are the query values as the client sends them ("" when it sends none), not
// the resolved path or user. expiration is in unix seconds; nil means the
// signature never expires.
func Sign(path string, op Op, username, token string, expiration *int64) string {
	s := path + ":" + string(op) + ":" + username + ":" + token
	if expiration != nil {
		s += ":" + strconv.FormatInt(*expiration, 10)
	}
	sum := sha256.Sum256([]byte(s))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// VerifySignature checks the signature in the query q of a /files request for
// op against token at time now, in constant time. It returns
// ErrMissingSignature, ErrInvalidSignature or ErrSignatureExpired; an expired
// signature is reported only once it has been found valid.
func VerifySignature(q url.Values, op Op, token string, now time.Time) error {
	got := q.Get("signature")
	if got == "" {
		return ErrMissingSignature
	}
	var expiration *int64
	if raw := q.Get("signature_expiration"); raw != "" {
		exp, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return ErrInvalidSignature
		}
		expiration = &exp
	}
	want := Sign(q.Get("path"), op, q.Get("username"), token, expiration)
	if subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		return ErrInvalidSignature
	}
	if expiration != nil && *expiration < now.Unix() {
		return ErrSignatureExpired
	}
	return nil
}
