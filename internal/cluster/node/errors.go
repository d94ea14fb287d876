package node

import (
	"errors"

	"github.com/agent-sandbox/agent-sandbox/internal/cluster/v1alpha1"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// errorClasses pairs each class of a node's Error with the sandbox
// manager's error it stands for: the node reports the class, the API
// replica answers with the error, so a create a node refuses gets the
// status a single host gives it.
var errorClasses = []struct {
	class v1alpha1.SandboxErrorClass
	err   error
}{
	{v1alpha1.ErrorInvalid, sandbox.ErrInvalid},
	{v1alpha1.ErrorConflict, sandbox.ErrConflict},
	{v1alpha1.ErrorLimit, sandbox.ErrLimit},
	{v1alpha1.ErrorUnavailable, sandbox.ErrUnavailable},
}

// ErrorClass is the class of a failed create's err; "" for the node's own
// failures.
func ErrorClass(err error) v1alpha1.SandboxErrorClass {
	for _, c := range errorClasses {
		if errors.Is(err, c.err) {
			return c.class
		}
	}
	return ""
}

// ClassError is the error a replica answers a create with when the node
// reported Error of class with reason: reason, as the client's message,
// wrapping the sandbox manager's error class stands for. It is nil for ""
// or a class this build does not know: the node's own failure.
func ClassError(class v1alpha1.SandboxErrorClass, reason string) error {
	for _, c := range errorClasses {
		if c.class == class {
			return &refusal{kind: c.err, reason: reason}
		}
	}
	return nil
}

// refusal is a node's refusal of a create, in the node's words.
type refusal struct {
	kind   error
	reason string
}

func (e *refusal) Error() string { return e.reason }

func (e *refusal) Unwrap() error { return e.kind }
