package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// internalMessage is all a client learns about a 500; the detail is logged.
const internalMessage = "internal server error"

// ErrNotImplemented is for a call a Sandboxes does not offer (cluster
// mode's API replicas offer fewer than a host): answered 501 with the
// error's text.
var ErrNotImplemented = errors.New("not implemented")

// errorBody is the E2B error body; code always equals the HTTP status.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// writeJSON writes v as a JSON response with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client is gone if this fails
}

// writeError writes {"code": status, "message": msg}.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorBody{Code: status, Message: msg})
}

// fail turns a manager error about sandbox id into an HTTP answer: not
// found 404, conflict 409, invalid 400, limit 429, template being built
// 503 with Retry-After, disk below the reserve 507, a call this server
// does not offer (ErrNotImplemented) 501,
// anything else 500 with the detail only in the log.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, id string, err error) {
	status, msg := h.failure(r, id, err)
	if building := (*template.BuildingError)(nil); errors.As(err, &building) {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(building.RetryAfter.Seconds())))))
	}
	writeError(w, status, msg)
}

// failure is the status and message fail answers err with.
func (h *Handler) failure(r *http.Request, id string, err error) (int, string) {
	switch {
	case errors.Is(err, sandbox.ErrNotFound) && id == "":
		return http.StatusNotFound, err.Error()
	case errors.Is(err, sandbox.ErrNotFound):
		msg := fmt.Sprintf("sandbox %q doesn't exist or you don't have access to it", id)
		if ended := (*sandbox.EndedError)(nil); errors.As(err, &ended) {
			msg += fmt.Sprintf(" (it ended at %s: %s)", ended.At.UTC().Format(time.RFC3339), ended.Detail())
		}
		return http.StatusNotFound, msg
	case errors.Is(err, sandbox.ErrNoFile):
		return http.StatusNotFound, err.Error()
	case errors.Is(err, sandbox.ErrConflict):
		return http.StatusConflict, err.Error()
	case errors.Is(err, sandbox.ErrInvalid):
		return http.StatusBadRequest, err.Error()
	case errors.Is(err, sandbox.ErrLimit):
		return http.StatusTooManyRequests, err.Error()
	case errors.Is(err, sandbox.ErrUnavailable):
		return http.StatusServiceUnavailable, err.Error()
	case errors.Is(err, sandbox.ErrNoSpace):
		return http.StatusInsufficientStorage, err.Error()
	case errors.Is(err, store.ErrInvalidToken):
		return http.StatusBadRequest, "invalid nextToken"
	case errors.Is(err, ErrNotImplemented):
		return http.StatusNotImplemented, err.Error()
	}
	h.log.Error("api request", "method", r.Method, "path", r.URL.Path, "sandbox_id", id, "err", err)
	return http.StatusInternalServerError, internalMessage
}

// decodeRequiredBody is decodeBody for calls whose body is required: an
// empty one is answered 400. It reports whether v was decoded.
func (h *Handler) decodeRequiredBody(w http.ResponseWriter, r *http.Request, v any) bool {
	err := h.decodeBody(w, r, v)
	if err == errNoBody {
		writeError(w, http.StatusBadRequest, errNoBody.Error())
	}
	return err == nil
}

// errNoBody is returned by decodeBody when the body is empty.
var errNoBody = errors.New("request body is required")

// decodeBody decodes the JSON request body into v. Unknown fields are
// ignored. An empty body gives errNoBody (callers with optional bodies treat
// it as {}); any other failure has already been answered (400, 408 or
// 413) and is returned only so the caller stops.
func (h *Handler) decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	// The deadline covers the body only: it is lifted before the handler's
	// real work, which a read deadline firing would cancel, unless it has
	// expired: then the server must not wait for the rest of the body
	// either. A writer that cannot take deadlines (tests' recorders) leaves
	// the body unbounded.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(h.bodyTimeout))

	body := http.MaxBytesReader(w, r.Body, h.maxBody)
	dec := json.NewDecoder(body)
	err := dec.Decode(v)
	if err == nil {
		// Exactly one JSON value: anything but whitespace after it is an error.
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("unexpected data after the JSON value")
			if terr != nil && !isSyntax(terr) {
				err = terr
			}
		}
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		_ = rc.SetReadDeadline(time.Time{})
	}
	if err == nil {
		return nil
	}
	if err == io.EOF { // nothing but whitespace
		return errNoBody
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		w.Header().Set("Connection", "close") // the rest of the body is not worth waiting for
		writeError(w, http.StatusRequestTimeout, fmt.Sprintf("request body not received within %s", h.bodyTimeout))
		return err
	}
	writeBodyError(w, err)
	return err
}

func isSyntax(err error) bool {
	var se *json.SyntaxError
	return errors.As(err, &se)
}

// writeBodyError answers a body that could not be decoded.
func writeBodyError(w http.ResponseWriter, err error) {
	var (
		maxErr  *http.MaxBytesError
		synErr  *json.SyntaxError
		typeErr *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &maxErr):
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is larger than %d bytes", maxErr.Limit))
	case errors.As(err, &synErr):
		writeError(w, http.StatusBadRequest, fmt.Sprintf("malformed JSON body at offset %d: %v", synErr.Offset, synErr))
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("malformed JSON body: expected %s, got %s", jsonKind(typeErr.Type.Kind().String()), typeErr.Value))
			return
		}
		writeError(w, http.StatusBadRequest, fmt.Sprintf("malformed JSON body: field %s: expected %s, got %s", field, jsonKind(typeErr.Type.Kind().String()), typeErr.Value))
	case errors.Is(err, io.ErrUnexpectedEOF):
		writeError(w, http.StatusBadRequest, "malformed JSON body: unexpected end of input")
	default:
		writeError(w, http.StatusBadRequest, "malformed JSON body: "+err.Error())
	}
}

// jsonKind names a Go kind the way a JSON client thinks of it.
func jsonKind(kind string) string {
	switch {
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"):
		return "an integer"
	case strings.HasPrefix(kind, "float"):
		return "a number"
	case kind == "string":
		return "a string"
	case kind == "bool":
		return "a boolean"
	case kind == "map", kind == "struct":
		return "an object"
	case kind == "slice", kind == "array":
		return "an array"
	}
	return kind
}
