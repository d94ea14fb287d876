package codeinterp

import "context"

// OutputKind says what an Output is.
type OutputKind int

// The kinds of output an execution produces.
const (
	Stdout OutputKind = iota + 1 // text the program wrote to standard output
	Stderr                       // text the program wrote to standard error
	Result                       // a MIME bundle: the cell's value or a display call
	Error                        // the execution failed
	Count                        // the execution count of this execution
)

// String returns the kind's name as used in the /execute stream.
func (k OutputKind) String() string {
	switch k {
	case Stdout:
		return "stdout"
	case Stderr:
		return "stderr"
	case Result:
		return "result"
	case Error:
		return "error"
	case Count:
		return "number_of_executions"
	}
	return "unknown"
}

// Output is one thing an execution produced, in order.
type Output struct {
	Kind                   OutputKind     // Stdout, Stderr, Result, Error, Count
	Text                   string         // Stdout, Stderr
	Data                   map[string]any // Result: the MIME bundle ("text/plain": "...", "image/png": base64 string, "application/json": object, "e2b/chart": object, ...)
	IsMain                 bool           // Result: execute_result (true) vs display_data (false)
	Name, Value, Traceback string         // Error
	Count                  int            // Count: the execution count of this execution
}

// Runtime is one stateful interpreter (a kernel) behind a context.
// The server calls its methods one at a time; a Runtime need not be safe
// for concurrent Execute calls, but Close may be called at any time.
type Runtime interface {
	// Execute runs code and calls emit for each output in order, from the
	// calling goroutine; it returns when the execution has ended.
	// Cancelling ctx interrupts the execution (the runtime stays usable);
	// Execute then returns nil or ctx.Err(). Any other error means the
	// runtime itself failed (died); a failing user program is an Error
	// output, not an error.
	Execute(ctx context.Context, code string, emit func(Output)) error
	// SetEnv sets environment variables for later executions and returns a
	// function that restores the previous values.
	SetEnv(ctx context.Context, vars map[string]string) (restore func(context.Context) error, err error)
	// Close ends the runtime. Idempotent.
	Close() error
}

// Factory starts a runtime for a language with a working directory.
type Factory func(ctx context.Context, cwd string) (Runtime, error)
