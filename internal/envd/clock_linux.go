package envd

import (
	"time"

	"golang.org/x/sys/unix"
)

// setClock sets the system clock; it needs CAP_SYS_TIME.
func setClock(t time.Time) error {
	tv := unix.NsecToTimeval(t.UnixNano())
	return unix.Settimeofday(&tv)
}
