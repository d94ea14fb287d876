package replica

import (
	"context"
	"crypto/subtle"
	"errors"

	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// Keys are the API keys a replica accepts: those it was given (serve
// --api-key, AGENT_SANDBOX_API_KEY from a Secret), until API keys are
// objects of the cluster too. It implements the api package's Keys.
type Keys struct {
	keys []string
}

// NewKeys accepts keys; there must be one at least.
func NewKeys(keys ...string) (*Keys, error) {
	if len(keys) == 0 {
		return nil, errors.New("an API replica needs an API key to accept: give --api-key or $AGENT_SANDBOX_API_KEY")
	}
	return &Keys{keys: keys}, nil
}

// VerifyAPIKey implements api.Keys: store.ErrNotFound for a key not
// given. Each comparison takes the same time whatever the key.
func (k *Keys) VerifyAPIKey(_ context.Context, plaintext string) (store.APIKey, error) {
	for _, key := range k.keys {
		if subtle.ConstantTimeCompare([]byte(key), []byte(plaintext)) == 1 {
			return store.APIKey{ID: "given", Name: "from --api-key", Prefix: key[:min(6, len(key))], Suffix: key[max(0, len(key)-4):]}, nil
		}
	}
	return store.APIKey{}, store.ErrNotFound
}
