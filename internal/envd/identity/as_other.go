//go:build !linux

package identity

// As runs fn as envd is: outside Linux envd runs only on a developer's
// machine, as the developer.
func (u *User) As(fn func() error) error { return fn() }
