package network

import (
	"errors"

	"github.com/vishvananda/netlink"
)

// dumpAttempts bounds the retries of one netlink dump.
const dumpAttempts = 10

// RetryDump runs a netlink dump until the kernel reports it complete. Links,
// addresses and qdiscs change whenever a sandbox starts or stops, and a dump
// that raced such a change comes back flagged as interrupted and possibly
// missing entries; a fresh dump is the documented remedy.
func RetryDump[T any](dump func() (T, error)) (T, error) {
	for i := 1; ; i++ {
		v, err := dump()
		if err == nil || !errors.Is(err, netlink.ErrDumpInterrupted) || i == dumpAttempts {
			return v, err
		}
	}
}
