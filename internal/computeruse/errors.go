package computeruse

import "fmt"

// InputError is an action the executor refuses: Field names the part of
// the request that is wrong ("input.coordinate", "action.keys[1]").
type InputError struct {
	Field string
	Msg   string
}

func (e *InputError) Error() string { return e.Field + ": " + e.Msg }

func inputErrorf(field, format string, args ...any) error {
	return &InputError{Field: field, Msg: fmt.Sprintf(format, args...)}
}
