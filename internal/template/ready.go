package template

import (
	"fmt"
	"strings"
	"time"
)

// DefaultReadyTimeout is how long a build waits for its template's ready
// command when Builder.ReadyTimeout is zero: E2B's builder's cap.
const DefaultReadyTimeout = 10 * time.Minute

// ReadyError is a build whose template did not become ready: its start
// command failed, or its ready command did not succeed in time. E2B calls
// this phase of a build "finalize".
type ReadyError struct {
	StartCmd, ReadyCmd string
	// StartExit is the start command's exit code when it ended with one
	// other than 0 before the ready command succeeded.
	StartExit int
	// Timeout is set when the ready command did not succeed within it;
	// ReadyExit is then its last exit code.
	Timeout   time.Duration
	ReadyExit int
	// LogTail holds the last lines the start and ready commands printed.
	LogTail []string
	// Err is the cause when the check could not run at all.
	Err error
}

// Error implements error.
func (e *ReadyError) Error() string {
	var b strings.Builder
	switch {
	case e.Err != nil:
		fmt.Fprintf(&b, "checking the start command %q and the ready command %q: %v", e.StartCmd, e.ReadyCmd, e.Err)
	case e.StartExit != 0:
		fmt.Fprintf(&b, "start command %q exited with code %d before the ready command %q succeeded", e.StartCmd, e.StartExit, e.ReadyCmd)
	default:
		fmt.Fprintf(&b, "ready command %q did not succeed within %s (its last run exited with code %d)", e.ReadyCmd, e.Timeout, e.ReadyExit)
	}
	if len(e.LogTail) > 0 {
		b.WriteString("; last output:\n  " + strings.Join(e.LogTail, "\n  "))
	}
	return b.String()
}

// Unwrap returns the cause, if any.
func (e *ReadyError) Unwrap() error { return e.Err }

// readyTimeout is b's wait for a ready command.
func (b *Builder) readyTimeout() time.Duration {
	if b.ReadyTimeout > 0 {
		return b.ReadyTimeout
	}
	return DefaultReadyTimeout
}
