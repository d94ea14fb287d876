package router

import (
	"encoding/json"
	"net/http"
)

// errorBody is the plain E2B error body.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// sandboxErrorBody is the proxy's body for an unreachable sandbox.
type sandboxErrorBody struct {
	SandboxID string `json:"sandboxId"`
	Message   string `json:"message"`
	Code      int    `json:"code"`
}

// portErrorBody is the proxy's body for a closed port.
type portErrorBody struct {
	SandboxID string `json:"sandboxId"`
	Message   string `json:"message"`
	Port      int    `json:"port"`
	Code      int    `json:"code"`
}

// writeJSON writes v as a JSON response with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client is gone if this fails
}
