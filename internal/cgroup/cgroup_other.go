//go:build !linux

package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
)

// Cgroup is one group; cgroups exist only on Linux.
type Cgroup struct{ name string }

// Detect returns an error wrapping errors.ErrUnsupported.
func Detect() (Mode, error) { return 0, errors.ErrUnsupported }

// Create returns an error wrapping errors.ErrUnsupported.
func Create(name string, _ Limits) (*Cgroup, error) {
	return nil, fmt.Errorf("creating cgroup %s: %w", name, errors.ErrUnsupported)
}

// Load returns an error wrapping errors.ErrUnsupported.
func Load(name string) (*Cgroup, error) {
	return nil, fmt.Errorf("loading cgroup %s: %w", name, errors.ErrUnsupported)
}

// Remove returns an error wrapping errors.ErrUnsupported.
func Remove(_ context.Context, name string) error {
	return fmt.Errorf("removing cgroup %s: %w", name, errors.ErrUnsupported)
}

// Name returns the group's name.
func (c *Cgroup) Name() string { return c.name }

// Mode returns 0.
func (c *Cgroup) Mode() Mode { return 0 }

// Dirs returns nil.
func (c *Cgroup) Dirs() []string { return nil }

// Controllers returns nil.
func (c *Cgroup) Controllers() []string { return nil }

// OpenDir returns errors.ErrUnsupported.
func (c *Cgroup) OpenDir() (*os.File, error) { return nil, errors.ErrUnsupported }

// Add returns errors.ErrUnsupported.
func (c *Cgroup) Add(int) error { return errors.ErrUnsupported }

// Procs returns errors.ErrUnsupported.
func (c *Cgroup) Procs() ([]int, error) { return nil, errors.ErrUnsupported }

// Freeze returns errors.ErrUnsupported.
func (c *Cgroup) Freeze(context.Context) error { return errors.ErrUnsupported }

// Thaw returns errors.ErrUnsupported.
func (c *Cgroup) Thaw(context.Context) error { return errors.ErrUnsupported }

// Frozen returns errors.ErrUnsupported.
func (c *Cgroup) Frozen() (bool, error) { return false, errors.ErrUnsupported }

// Kill returns errors.ErrUnsupported.
func (c *Cgroup) Kill(context.Context) error { return errors.ErrUnsupported }

// Signal returns errors.ErrUnsupported.
func (c *Cgroup) Signal() error { return errors.ErrUnsupported }

// Delete returns errors.ErrUnsupported.
func (c *Cgroup) Delete(context.Context) error { return errors.ErrUnsupported }

// LimitIO returns errors.ErrUnsupported.
func (c *Cgroup) LimitIO(IOLimit) error { return errors.ErrUnsupported }

// Stats returns errors.ErrUnsupported.
func (c *Cgroup) Stats() (Stats, error) { return Stats{}, errors.ErrUnsupported }
