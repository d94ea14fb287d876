//go:build !linux

package network

import (
	"context"
	"errors"
	"net/netip"
	"time"
)

// Drop is one packet the firewall dropped from a sandbox.
type Drop struct {
	Time    time.Time
	HostIf  string
	Reason  string
	Proto   string
	Src     netip.Addr
	Dst     netip.Addr
	DstPort uint16
}

// DropLog reads the firewall's drop log; only Linux has it.
type DropLog struct{}

// OpenDropLog is not supported on this platform.
func OpenDropLog(group uint16) (*DropLog, error) { return nil, errors.ErrUnsupported }

// Read is not supported on this platform.
func (l *DropLog) Read(ctx context.Context, fn func(Drop)) error { return errors.ErrUnsupported }

// Close is not supported on this platform.
func (l *DropLog) Close() error { return errors.ErrUnsupported }
