// Package httpjson writes the JSON bodies of envd's plain HTTP endpoints.
package httpjson

import (
	"encoding/json"
	"net/http"
)

// Error writes the envd error body {"code": status, "message": msg}.
func Error(w http.ResponseWriter, status int, msg string) {
	Write(w, status, struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{status, msg})
}

// Write writes v as a JSON response with the given status.
func Write(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client is gone if this fails
}
