package jupyter

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// drainTimeout bounds how long an execution whose ctx ended waits for the
// interrupted kernel to go idle.
const drainTimeout = 3 * time.Second

// Reply is the content of an execute_reply.
type Reply struct {
	Status         string   `json:"status"` // ok, error or aborted
	ExecutionCount int      `json:"execution_count"`
	EName          string   `json:"ename"`
	EValue         string   `json:"evalue"`
	Traceback      []string `json:"traceback"`
}

// executeRequest is the content of an execute_request.
type executeRequest struct {
	Code            string   `json:"code"`
	Silent          bool     `json:"silent"`
	StoreHistory    bool     `json:"store_history"`
	UserExpressions struct{} `json:"user_expressions"`
	AllowStdin      bool     `json:"allow_stdin"`
	StopOnError     bool     `json:"stop_on_error"`
}

// Execute runs code and calls handle, in order, for each iopub message other
// than status whose parent is this request (stream, display_data,
// execute_input, execute_result, error, …). It returns the execute_reply once
// that has arrived and iopub has reported the kernel idle for this request.
// Executions on one Kernel are serialized.
//
// When ctx ends first, Execute interrupts the kernel, waits a few seconds at
// most for it to go idle (without calling handle any more) and returns
// ctx.Err(). When the kernel process exits it returns an error wrapping
// ErrDied.
//
// Requests never stop on error: with stop_on_error, ipykernel aborts every
// request that arrives for a moment after an error, which here is the
// caller's next, independent execution.
func (k *Kernel) Execute(ctx context.Context, code string, handle func(Message)) (Reply, error) {
	return k.execute(ctx, executeRequest{Code: code, StoreHistory: true}, handle)
}

// Silent runs code without output, history or a new execution count, as for
// setting environment variables. Its reply is as Execute's.
func (k *Kernel) Silent(ctx context.Context, code string) (Reply, error) {
	return k.execute(ctx, executeRequest{Code: code, Silent: true}, nil)
}

func (k *Kernel) execute(ctx context.Context, req executeRequest, handle func(Message)) (Reply, error) {
	select {
	case k.execSem <- struct{}{}:
	case <-ctx.Done():
		return Reply{}, fmt.Errorf("waiting for the previous execution: %w", ctx.Err())
	case <-k.done:
		return Reply{}, fmt.Errorf("executing: %w", k.died())
	}
	defer func() { <-k.execSem }()
	select {
	case <-k.done: // Close released the token after the process had exited
		return Reply{}, fmt.Errorf("executing: %w", k.died())
	default:
	}

	r := k.newRoute()
	defer k.dropRoute(r)
	if err := k.request(k.shell, r, "execute_request", req); err != nil {
		return Reply{}, err
	}
	var (
		reply          Reply
		replied, idle  bool
		started        bool         // execute_input seen: the kernel runs the code
		interruptLater bool         // interrupted before the code started: signal once it has
		cancelled      bool         // ctx ended: the caller has gone
		ctxDone        = ctx.Done() // nil once handled (and for a ctx that never ends)
		drain          <-chan time.Time
	)
	for !replied || !idle {
		select {
		case m := <-r.reply:
			if err := json.Unmarshal(m.Content, &reply); err != nil {
				return Reply{}, fmt.Errorf("decoding execute_reply: %w", err)
			}
			replied = true
		case m := <-r.iopub:
			switch m.Header.MsgType {
			case "status":
				var st struct {
					State string `json:"execution_state"`
				}
				if err := json.Unmarshal(m.Content, &st); err != nil {
					return Reply{}, fmt.Errorf("decoding status: %w", err)
				}
				idle = st.State == "idle"
				continue
			case "execute_input":
				started = true
				// ipykernel ignores SIGINT until it handles a request, so
				// an interrupt that came before execute_input is sent now.
				if interruptLater {
					interruptLater = false
					k.interruptOrLog()
				}
			}
			if handle != nil && !cancelled {
				handle(m)
			}
		case <-ctxDone:
			ctxDone, cancelled = nil, true
			// Only one SIGINT per execution: a second one could land
			// after the code ended, in the next execution. Silent code
			// has no execute_input to wait for.
			interruptLater = !started && !req.Silent
			if !interruptLater {
				k.interruptOrLog()
			}
			drain = time.After(drainTimeout)
		case <-drain:
			return Reply{}, fmt.Errorf("executing: %w (kernel still busy after interrupt)", ctx.Err())
		case <-k.done:
			return Reply{}, fmt.Errorf("executing: %w", k.died())
		}
	}
	if cancelled {
		return Reply{}, fmt.Errorf("executing: %w (interrupted)", ctx.Err())
	}
	return reply, nil
}

// interruptOrLog interrupts the kernel on behalf of an execution whose
// caller has gone; the execution's error says why it ended.
func (k *Kernel) interruptOrLog() {
	if err := k.Interrupt(); err != nil {
		k.log.Warn("interrupting kernel", "err", err)
	}
}
