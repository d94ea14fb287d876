package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// Server-side create defaults (spec §2.3).
const (
	defaultTimeoutV1 = 15 * time.Second
	// DefaultSandboxTimeout is E2B's for creates and connects of the v2
	// API that send none (Config.DefaultTimeout).
	DefaultSandboxTimeout = 300 * time.Second
)

// createBody is NewSandbox (v1) and NewSandboxV2; v2 has no secure field.
// The fields the server does not implement yet (mcp, iam) are decoded
// only to refuse them (unsupportedCreate); the SDK sends none of them
// unless asked to.
type createBody struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             json.RawMessage   `json:"network"`
	AutoPause           *bool             `json:"autoPause"`
	Secure              *bool             `json:"secure"`

	VolumeMounts []store.VolumeMount `json:"volumeMounts"`

	MCP             json.RawMessage `json:"mcp"`
	IAM             json.RawMessage `json:"iam"`
	AutoPauseMemory *bool           `json:"autoPauseMemory"`
	AutoResume      *struct {
		Enabled bool `json:"enabled"`
	} `json:"autoResume"`
}

// unsupportedCreate returns the message refusing the first field of body
// that asks for something not implemented yet, or "". Each field's no-op
// value (absent, null, empty) is accepted.
func unsupportedCreate(body createBody) string {
	switch {
	case !emptyJSON(body.MCP):
		return notSupported("mcp", "an MCP gateway in the sandbox")
	case !emptyJSON(body.IAM):
		return notSupported("iam", "workload identity tokens")
	}
	return ""
}

// notSupported is the 400 message for a request field the server does not
// implement yet.
func notSupported(field, what string) string {
	return fmt.Sprintf("%s (%s) is not supported yet by this server", field, what)
}

// createV1 implements POST /sandboxes: timeout 15 s and secure false by
// default.
func (h *Handler) createV1(w http.ResponseWriter, r *http.Request) {
	h.create(w, r, defaultTimeoutV1, false)
}

// createV2 implements POST /v2/sandboxes: timeout 300 s, always secure.
func (h *Handler) createV2(w http.ResponseWriter, r *http.Request) {
	h.create(w, r, h.defTimeout, true)
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request, defTimeout time.Duration, v2 bool) {
	var body createBody
	if !h.decodeRequiredBody(w, r, &body) {
		return
	}
	if body.TemplateID == "" {
		writeError(w, http.StatusBadRequest, "templateID is required")
		return
	}
	if msg := unsupportedCreate(body); msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	timeout := defTimeout
	if body.Timeout != nil {
		d, ok := h.timeout(w, r, *body.Timeout)
		if !ok {
			return
		}
		timeout = d
	} else if !h.withinKeyLimit(w, r, timeout) {
		return
	}
	network := body.Network
	if bytes.Equal(bytes.TrimSpace(network), []byte("null")) {
		network = nil
	}
	if len(network) > 0 && bytes.TrimSpace(network)[0] != '{' {
		writeError(w, http.StatusBadRequest, "malformed JSON body: field network: expected an object")
		return
	}
	req := sandbox.CreateRequest{
		Template:            body.TemplateID,
		Timeout:             timeout,
		Metadata:            body.Metadata,
		EnvVars:             body.EnvVars,
		AutoPause:           body.AutoPause != nil && *body.AutoPause,
		AutoPauseFiles:      body.AutoPauseMemory != nil && !*body.AutoPauseMemory,
		AutoResume:          body.AutoResume != nil && body.AutoResume.Enabled,
		Secure:              v2 || (body.Secure != nil && *body.Secure),
		AllowInternetAccess: body.AllowInternetAccess,
		Network:             network,
		VolumeMounts:        body.VolumeMounts,
	}
	sb, err := h.sandboxes.Create(r.Context(), req)
	if err != nil {
		h.fail(w, r, "", err)
		return
	}
	writeJSON(w, http.StatusCreated, h.sandboxView(sb))
}

// seconds converts a timeout in seconds from a request, which must be at
// least 1; the message is empty when n is acceptable.
func seconds(field string, n int64) (time.Duration, string) {
	if n < 1 {
		return 0, fmt.Sprintf("%s must be at least 1 second, got %d", field, n)
	}
	if n > math.MaxInt32 {
		return 0, fmt.Sprintf("%s of %d seconds is too large", field, n)
	}
	return time.Duration(n) * time.Second, ""
}
