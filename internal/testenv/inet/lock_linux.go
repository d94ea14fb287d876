package inet

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/network"
)

// lockWait bounds the wait for an address another test holds, so that a
// test which holds it too long (or a test that starts two Internets with a
// common address) fails instead of hanging.
const lockWait = 3 * time.Minute

var errBusy = errors.New("held by another test internet")

// lockAddrs takes the host-wide locks on the link's two addresses and on
// p.addrs, picking a free link first if p has none, and returns the link
// and a func that releases the locks.
func lockAddrs(p plan) (netip.Prefix, func() error, error) {
	var held []*os.File
	release := func() error {
		for _, f := range held {
			f.Close() // closing releases the lock
		}
		return nil
	}
	link := p.link
	wait := p.addrs
	if link.IsValid() {
		wait = append(linkAddrs(link), p.addrs...)
		slices.SortFunc(wait, netip.Addr.Compare)
	} else {
		var err error
		link, held, err = pickLink(p.addrs)
		if err != nil {
			return netip.Prefix{}, nil, err
		}
	}
	// In address order, so that two tests waiting for each other's
	// addresses cannot deadlock (a picked link is never waited for).
	for _, a := range wait {
		f, err := lockAddr(a, lockWait)
		if err != nil {
			release()
			return netip.Prefix{}, nil, err
		}
		held = append(held, f)
	}
	return link, release, nil
}

// pickLink finds a /30 in defaultLinks that holds none of avoid, overlaps
// no host address and whose addresses it can lock at once.
func pickLink(avoid []netip.Addr) (netip.Prefix, []*os.File, error) {
	addrs, err := network.RetryDump(func() ([]netlink.Addr, error) { return netlink.AddrList(nil, netlink.FAMILY_V4) })
	if err != nil {
		return netip.Prefix{}, nil, fmt.Errorf("listing host addresses: %w", err)
	}
	var used []netip.Prefix
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ones, _ := a.Mask.Size()
		used = append(used, netip.PrefixFrom(ip.Unmap(), ones).Masked())
	}
	base := defaultLinks.Addr().As4()
	blocks := 1 << (32 - defaultLinks.Bits() - 2)
next:
	// From the first block on, so that tests reuse a few lock files rather
	// than leave a new pair in os.TempDir() each time.
	for i := range min(blocks, 256) {
		b := uint32(i) * 4
		link := netip.PrefixFrom(netip.AddrFrom4([4]byte{base[0], base[1], byte(b >> 8), byte(b)}), 30)
		for _, a := range avoid {
			if link.Contains(a) {
				continue next
			}
		}
		for _, u := range used {
			if u.Overlaps(link) {
				continue next
			}
		}
		var held []*os.File
		for _, a := range linkAddrs(link) {
			f, err := lockAddr(a, 0)
			if err != nil {
				for _, f := range held {
					f.Close()
				}
				if errors.Is(err, errBusy) {
					continue next
				}
				return netip.Prefix{}, nil, err
			}
			held = append(held, f)
		}
		return link, held, nil
	}
	return netip.Prefix{}, nil, fmt.Errorf("no free link in %s", defaultLinks)
}

// linkAddrs returns the host and far ends of link.
func linkAddrs(link netip.Prefix) []netip.Addr {
	host := link.Addr().Next()
	return []netip.Addr{host, host.Next()}
}

// lockAddr locks a's file in os.TempDir(), waiting up to wait. A file
// lock rather than an in-process one, because go test runs the packages'
// test binaries in parallel.
func lockAddr(a netip.Addr, wait time.Duration) (*os.File, error) {
	path := filepath.Join(os.TempDir(), "agent-sandbox-inet-"+a.String()+".lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock for %s: %w", a, err)
	}
	deadline := time.Now().Add(wait)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return f, nil
		case errors.Is(err, unix.EINTR):
		case !errors.Is(err, unix.EWOULDBLOCK):
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		case wait == 0:
			f.Close()
			return nil, fmt.Errorf("address %s: %w", a, errBusy)
		case time.Now().After(deadline):
			f.Close()
			return nil, fmt.Errorf("address %s: %w for over %v (lock %s)", a, errBusy, wait, path)
		default:
			time.Sleep(50 * time.Millisecond)
		}
	}
}
