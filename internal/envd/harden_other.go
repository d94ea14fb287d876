//go:build !linux

package envd

// harden does nothing where there is no /proc to protect: envd runs there
// only on a developer's machine.
func harden() error { return nil }
