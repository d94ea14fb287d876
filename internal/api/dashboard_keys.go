package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// APIKeys manages the API keys for the dashboard's keys page;
// *store.Store implements it.
type APIKeys interface {
	ListAPIKeys(ctx context.Context) ([]store.APIKey, error)
	CreateAPIKey(ctx context.Context, name string, maxTimeout time.Duration) (string, store.APIKey, error)
	RevokeAPIKey(ctx context.Context, id string) error
}

// maxKeyName bounds the name of a key created on the dashboard.
const maxKeyName = 100

// apiKeyView is one API key as the dashboard lists it: never the key.
type apiKeyView struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Masked     string     `json:"masked"`
	CreatedAt  time.Time  `json:"createdAt"`
	LastUsedAt *time.Time `json:"lastUsedAt"`
	// MaxTimeout is in seconds; 0: no limit of the key's own.
	MaxTimeout int64 `json:"maxTimeout"`
	// Current is the key of the session asking.
	Current bool `json:"current"`
}

// createdKeyView is the answer of a create: the key, this once.
type createdKeyView struct {
	apiKeyView
	Key string `json:"key"`
}

func (h *Handler) keyView(r *http.Request, k store.APIKey) apiKeyView {
	v := apiKeyView{ID: k.ID, Name: k.Name, Masked: k.Masked(), CreatedAt: k.CreatedAt.UTC(), MaxTimeout: int64(k.MaxTimeout / time.Second)}
	if !k.LastUsedAt.IsZero() {
		t := k.LastUsedAt.UTC()
		v.LastUsedAt = &t
	}
	current, _ := r.Context().Value(apiKeyContext{}).(store.APIKey)
	v.Current = current.ID == k.ID
	return v
}

// listKeys implements GET /dashboard/api/keys: every key, oldest first.
func (h *Handler) listKeys(w http.ResponseWriter, r *http.Request) {
	keys, err := h.apiKeys.ListAPIKeys(r.Context())
	if err != nil {
		h.fail(w, r, "", err)
		return
	}
	out := make([]apiKeyView, 0, len(keys))
	for _, k := range keys {
		out = append(out, h.keyView(r, k))
	}
	writeJSON(w, http.StatusOK, out)
}

// createKey implements POST /dashboard/api/keys {"name": …, "maxTimeout":
// seconds (optional)}: a new key, answered this once.
func (h *Handler) createKey(w http.ResponseWriter, r *http.Request) {
	var raw json.RawMessage
	if !h.decodeRequiredBody(w, r, &raw) {
		return
	}
	var body struct {
		Name       string `json:"name"`
		MaxTimeout *int64 `json:"maxTimeout"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	if body.Name == "" || len(body.Name) > maxKeyName {
		writeError(w, http.StatusBadRequest, "name is required: 1 to "+strconv.Itoa(maxKeyName)+" bytes, to tell keys apart")
		return
	}
	var limit time.Duration
	if body.MaxTimeout != nil {
		d, msg := seconds("maxTimeout", *body.MaxTimeout)
		if msg != "" {
			writeError(w, http.StatusBadRequest, msg)
			return
		}
		limit = d
	}
	key, k, err := h.apiKeys.CreateAPIKey(r.Context(), body.Name, limit)
	if err != nil {
		h.fail(w, r, "", err)
		return
	}
	writeJSON(w, http.StatusCreated, createdKeyView{apiKeyView: h.keyView(r, k), Key: key})
}

// revokeKey implements DELETE /dashboard/api/keys/{keyID}. Revoking the
// session's own key ends the session: the cookie goes with it, and the
// answer says so ({"signedOut": true}).
func (h *Handler) revokeKey(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("keyID")
	if err := h.apiKeys.RevokeAPIKey(r.Context(), id); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			writeError(w, http.StatusNotFound, "keyID: no API key "+strconv.Quote(id))
			return
		}
		h.fail(w, r, "", err)
		return
	}
	current, _ := r.Context().Value(apiKeyContext{}).(store.APIKey)
	signedOut := current.ID == id
	if signedOut {
		h.setSession(w, r, "", -1)
	}
	writeJSON(w, http.StatusOK, map[string]bool{"signedOut": signedOut})
}
