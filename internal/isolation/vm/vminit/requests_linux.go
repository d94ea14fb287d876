package vminit

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
	"unsafe"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation/guest"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// serveRequests carries out each Request the host writes to init's
// stdin (the console) and answers on the console. Echo is off: an
// identity carries a random seed.
func serveRequests() {
	if t, err := unix.IoctlGetTermios(0, unix.TCGETS); err == nil {
		t.Lflag &^= unix.ECHO | unix.ECHONL
		_ = unix.IoctlSetTermios(0, unix.TCSETS, t)
	}
	var fr freezer
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var r Request
		if err := json.Unmarshal(in.Bytes(), &r); err != nil {
			fmt.Fprintf(os.Stderr, "vminit: request: %v\n", err)
			continue
		}
		if err := r.Validate(); err != nil {
			fmt.Fprintf(os.Stderr, "vminit: request: %v\n", err)
			continue
		}
		var err error
		switch r.Op {
		case OpIdentity:
			err = r.Identity.apply()
		case OpFreeze:
			err = fr.freeze()
		case OpThaw:
			err = fr.thaw()
		case OpSync:
			unix.Sync()
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "vminit: %s %s: %v\n", r.Op, r.Nonce, err)
			continue
		}
		fmt.Fprintf(os.Stderr, Done+"\n", r.Op, r.Nonce)
	}
}

// FIFREEZE and FITHAW, _IOWR('X', 119, int) and _IOWR('X', 120, int).
const (
	fiFreeze = 0xc0045877
	fiThaw   = 0xc0045878
)

// freezer freezes and thaws the root file system, thawing it by itself
// after FreezeLimit.
type freezer struct {
	mu    sync.Mutex // guards timer
	timer *time.Timer
}

func (f *freezer) freeze() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.timer != nil {
		return errors.New("already frozen")
	}
	if err := rootIoctl(fiFreeze); err != nil {
		return fmt.Errorf("freezing /: %w", err)
	}
	f.timer = time.AfterFunc(FreezeLimit, func() {
		if f.thaw() == nil {
			fmt.Fprintf(os.Stderr, "vminit: thawed / after %v without the host's thaw\n", FreezeLimit)
		}
	})
	return nil
}

func (f *freezer) thaw() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.timer == nil {
		return errors.New("not frozen")
	}
	f.timer.Stop()
	f.timer = nil
	if err := rootIoctl(fiThaw); err != nil {
		return fmt.Errorf("thawing /: %w", err)
	}
	return nil
}

func rootIoctl(req uint) error {
	fd, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.IoctlSetInt(fd, req, 0)
}

// apply makes the guest id: the clock first (the rest may log), then the
// random pool, the hostname and the network.
func (id *Identity) apply() error {
	if err := id.Validate(); err != nil {
		return err
	}
	ts := unix.NsecToTimespec(id.Time.UnixNano())
	if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
		return fmt.Errorf("setting the clock: %w", err)
	}
	if err := reseed(id.Seed); err != nil {
		return err
	}
	if err := unix.Sethostname([]byte(id.Hostname)); err != nil {
		return fmt.Errorf("setting the hostname: %w", err)
	}
	return renumber(id.Network)
}

// reseed mixes seed into the kernel's random pool, credited, and makes
// the kernel's generator reseed from it now: the clone's pool is the
// saved VM's, as every other clone's is.
func reseed(seed []byte) error {
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("reseeding: %w", err)
	}
	defer f.Close()
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
	info := make([]byte, 8+len(seed))
	*(*int32)(unsafe.Pointer(&info[0])) = int32(8 * len(seed))
	*(*int32)(unsafe.Pointer(&info[4])) = int32(len(seed))
	copy(info[8:], seed)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.RNDADDENTROPY, uintptr(unsafe.Pointer(&info[0]))); errno != 0 {
		return fmt.Errorf("reseeding: adding entropy: %w", errno)
	}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.RNDRESEEDCRNG, 0); errno != 0 {
		return fmt.Errorf("reseeding: %w", errno)
	}
	return nil
}

// renumber replaces eth0's address, the default route and the resolver
// with n's, and forgets the neighbours: the host side of the link is a
// new tap, with a new MAC address.
func renumber(n *Network) error {
	eth, err := netlink.LinkByName(guestIf)
	if err != nil {
		return fmt.Errorf("finding %s: %w", guestIf, err)
	}
	addrs, err := netlink.AddrList(eth, unix.AF_INET)
	if err != nil {
		return fmt.Errorf("listing %s's addresses: %w", guestIf, err)
	}
	for _, a := range addrs {
		if err := netlink.AddrDel(eth, &a); err != nil {
			return fmt.Errorf("removing %s from %s: %w", a.IPNet, guestIf, err)
		}
	}
	neighs, err := netlink.NeighList(eth.Attrs().Index, unix.AF_INET)
	if err != nil {
		return fmt.Errorf("listing %s's neighbours: %w", guestIf, err)
	}
	for _, nb := range neighs {
		if err := netlink.NeighDel(&nb); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("forgetting neighbour %s: %w", nb.IP, err)
		}
	}
	if err := configure(eth, n); err != nil {
		return err
	}
	return guest.WriteResolvConf(n.Gateway.String(), 0)
}
