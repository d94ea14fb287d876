//go:build !linux

package network

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
)

// Namespace is a named network namespace; only Linux has them.
type Namespace struct{ name string }

// Dir returns the directory holding the namespaces' bind mounts under runDir.
func Dir(runDir string) string { return filepath.Join(runDir, "netns") }

// Create is not supported on this platform.
func Create(runDir, name string) (*Namespace, error) { return nil, errors.ErrUnsupported }

// Open is not supported on this platform.
func Open(runDir, name string) (*Namespace, error) { return nil, errors.ErrUnsupported }

// List is not supported on this platform.
func List(runDir string) ([]string, error) { return nil, errors.ErrUnsupported }

// Remove is not supported on this platform.
func Remove(runDir, name string) error { return errors.ErrUnsupported }

// Name returns the namespace's name.
func (ns *Namespace) Name() string { return ns.name }

// Path is empty on this platform.
func (ns *Namespace) Path() string { return "" }

// Do is not supported on this platform.
func (ns *Namespace) Do(fn func() error) error { return errors.ErrUnsupported }

// Dial is not supported on this platform.
func (ns *Namespace) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	return nil, errors.ErrUnsupported
}

// Delete is not supported on this platform.
func (ns *Namespace) Delete() error { return errors.ErrUnsupported }

// OpenTap is not supported on this platform.
func (ns *Namespace) OpenTap(name string) (*os.File, error) { return nil, errors.ErrUnsupported }

// ForwardTo is not supported on this platform.
func (ns *Namespace) ForwardTo(dev string, link Link) error { return errors.ErrUnsupported }
