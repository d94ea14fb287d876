package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/coder/websocket"
)

// maxTerminalSide bounds the PTY sizes a page may ask for.
const maxTerminalSide = 1000

// terminalResize is the one text message a terminal page sends; its
// binary messages are typed input.
type terminalResize struct {
	Cols uint32 `json:"cols"`
	Rows uint32 `json:"rows"`
}

// terminal implements GET /dashboard/api/sandboxes/{id}/terminal?cols=&rows=:
// a WebSocket to a login shell on a PTY in the sandbox. Binary messages
// from the page are input, text messages resizes ({"cols":…,"rows":…});
// the server sends the PTY's output as binary messages and closes with
// status 1000 when the shell exits. The WebSocket accepts only a page of
// this server's own origin.
func (h *Handler) terminal(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	size, msg := parseTerminalSize(r.URL.Query().Get("cols"), r.URL.Query().Get("rows"))
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	// Cancelling ends the shell's output stream: the page going away must
	// not leave this handler waiting for output that never comes.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	term, err := h.sandboxes.OpenTerminal(ctx, id, size.Cols, size.Rows)
	if err != nil {
		h.fail(w, r, id, err)
		return
	}
	// Close kills the shell, so it runs on after r's context has ended.
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
		defer cancel()
		if err := term.Close(ctx); err != nil {
			h.log.Debug("closing a dashboard terminal", "sandbox_id", id, "err", err)
		}
	}()
	ws, err := websocket.Accept(w, r, nil) // same origin only
	if err != nil {
		return // Accept answered
	}
	defer ws.CloseNow()
	input := make(chan struct{})
	defer func() {
		cancel()
		<-input
	}()
	// Input: what the page sends, until it goes away or ctx ends.
	go func() {
		defer close(input)
		defer cancel()
		for {
			typ, p, err := ws.Read(ctx)
			if err != nil {
				return
			}
			if typ == websocket.MessageBinary {
				err = term.Write(ctx, p)
			} else {
				var rs terminalResize
				if json.Unmarshal(p, &rs) != nil || rs.Cols == 0 || rs.Rows == 0 || rs.Cols > maxTerminalSide || rs.Rows > maxTerminalSide {
					ws.Close(websocket.StatusUnsupportedData, "a text message is a resize: {\"cols\":N,\"rows\":N}")
					return
				}
				err = term.Resize(ctx, rs.Cols, rs.Rows)
			}
			if err != nil {
				h.log.Debug("dashboard terminal input", "sandbox_id", id, "err", err)
				ws.Close(websocket.StatusInternalError, "the sandbox did not take the input")
				return
			}
		}
	}()
	// Output: the shell's, until it exits.
	for {
		out, ok, err := term.Read()
		if !ok {
			if err != nil && !errors.Is(err, context.Canceled) {
				ws.Close(websocket.StatusInternalError, "the terminal's stream broke")
				return
			}
			ws.Close(websocket.StatusNormalClosure, "the shell exited")
			return
		}
		if err := ws.Write(ctx, websocket.MessageBinary, out); err != nil {
			return
		}
	}
}

// parseTerminalSize reads the cols and rows query parameters; msg names
// the one that is wrong.
func parseTerminalSize(cols, rows string) (terminalResize, string) {
	var size terminalResize
	for _, f := range []struct {
		name, value string
		to          *uint32
	}{{"cols", cols, &size.Cols}, {"rows", rows, &size.Rows}} {
		n, err := strconv.ParseUint(f.value, 10, 32)
		if err != nil || n == 0 || n > maxTerminalSide {
			return size, f.name + " must be a number from 1 to " + strconv.Itoa(maxTerminalSide)
		}
		*f.to = uint32(n)
	}
	return size, ""
}
