package volume

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ErrUnauthorized is returned (wrapped) for a content request whose token
// is missing, malformed, expired, or for another volume.
var ErrUnauthorized = errors.New("invalid volume token")

// TokenTTL is how long a volume token is good for; Volume.connect (GET
// /volumes/{id}) gives a fresh one.
const TokenTTL = 24 * time.Hour

// tokens signs and checks the bearer tokens of the volume content API:
// "<volume ID>.<expiry, unix s>.<HMAC-SHA256 of both>", opaque to the SDK.
type tokens struct {
	key []byte
	now func() time.Time
}

// loadTokens reads the signing key from path, making it first.
func loadTokens(path string) (*tokens, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key, made := makeKey(path)
		if made == nil {
			return &tokens{key: key, now: time.Now}, nil
		}
		if !errors.Is(made, fs.ErrExist) {
			return nil, made
		}
		// A concurrent first start made it: keep its key.
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the volume token key: %w", err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) < 32 {
		return nil, fmt.Errorf("volume token key %s is malformed; remove it to make a new one (tokens given out so far stop working)", path)
	}
	return &tokens{key: key, now: time.Now}, nil
}

// makeKey writes a new key to path, which must not exist; fs.ErrExist
// (wrapped) when it does. The key is written to a file of its own first
// and linked into place whole, so of two first starts one wins and the
// other never reads a key half written.
func makeKey(path string) ([]byte, error) {
	key := make([]byte, 32)
	rand.Read(key)
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("making the volume token key's directory: %w", err)
	}
	f, err := os.CreateTemp(dir, ".key-*")
	if err != nil {
		return nil, fmt.Errorf("writing the volume token key: %w", err)
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString(hex.EncodeToString(key))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("writing the volume token key: %w", err)
	}
	if err := os.Link(f.Name(), path); err != nil {
		return nil, fmt.Errorf("making the volume token key: %w", err)
	}
	return key, nil
}

func (t *tokens) sign(payload string) string {
	m := hmac.New(sha256.New, t.key)
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// issue returns a token for volume id, good for TokenTTL.
func (t *tokens) issue(id string) string {
	payload := id + "." + strconv.FormatInt(t.now().Add(TokenTTL).Unix(), 10)
	return payload + "." + t.sign(payload)
}

// verify checks that token is one of issue's for volume id, unexpired.
func (t *tokens) verify(token, id string) error {
	i := strings.LastIndexByte(token, '.')
	if i < 0 {
		return fmt.Errorf("%w: malformed", ErrUnauthorized)
	}
	payload, mac := token[:i], token[i+1:]
	if !hmac.Equal([]byte(mac), []byte(t.sign(payload))) {
		return fmt.Errorf("%w: bad signature", ErrUnauthorized)
	}
	vol, exp, ok := strings.Cut(payload, ".")
	if !ok || vol != id {
		return fmt.Errorf("%w: it is for another volume", ErrUnauthorized)
	}
	n, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || t.now().Unix() > n {
		return fmt.Errorf("%w: expired; get a fresh one with Volume.connect", ErrUnauthorized)
	}
	return nil
}
