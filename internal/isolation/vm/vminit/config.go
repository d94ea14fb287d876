package vminit

import (
	"errors"
	"fmt"
	"net/netip"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation/guest"
)

// Config is what the host tells the guest's init; the host appends it to the initramfs.
type Config struct {
	Hostname  string
	Network   *Network          `json:",omitempty"` // nil: loopback only
	EnvdArgs  []string          // after the binary path
	EnvdToken string            `json:",omitempty"` // envd reads it from a pipe (guest pkg)
	Binaries  map[string]string // guest path in the root → path on the tools disk
	Pids      int               // cap on tasks of envd and everything under it (cgroup pids.max)
	// NoNewPrivs sets no_new_privs for envd and everything under it.
	NoNewPrivs bool
	// Volumes are where init mounts the volume disks, the i-th the disk
	// with serial VolumeSerial(i): read-write, without devices or setuid.
	Volumes []string `json:",omitempty"`
}

// VolumeSerial is the serial of the i-th volume disk (virtio-blk's, at
// most 20 bytes), by which init finds it whatever its device's name.
func VolumeSerial(i int) string { return "asb-volume-" + strconv.Itoa(i) }

// Network is the guest's eth0.
type Network struct {
	Address   netip.Prefix // the guest's eth0 address and prefix
	Gateway   netip.Addr   // default route and nameserver (/etc/resolv.conf)
	Forwarder netip.Addr   // the host side's own address: TCP from it is DNAT'ed to 127.0.0.1
}

// Request is one line of JSON the host writes to init's console, for
// the VM's whole life; init answers each with the line Done (op and
// nonce) or "vminit: <op> <nonce>: <error>" (serveRequests).
type Request struct {
	Op    string // OpIdentity, OpFreeze, OpThaw or OpSync
	Nonce string // names the answer
	// Identity is OpIdentity's.
	Identity *Identity `json:",omitempty"`
}

// The requests init serves.
const (
	// OpIdentity makes a VM restored from a memory snapshot a sandbox of
	// its own, before anything of the sandbox's goes on in it.
	OpIdentity = "identity"
	// OpFreeze flushes the root file system and holds every write to it
	// (FIFREEZE), so that the host can copy the disk at one consistent
	// point; OpThaw lets writes go on. Init thaws by itself after
	// FreezeLimit, should the host never say so.
	OpFreeze = "freeze"
	OpThaw   = "thaw"
	// OpSync writes back what the guest's file systems hold in its
	// memory, so that a volume's disk has every write once the host
	// stops the VM.
	OpSync = "sync"
)

// FreezeLimit is the longest init keeps the root file system frozen.
const FreezeLimit = 30 * time.Second

// Done is init's answer to a request it carried out: op, nonce.
const Done = "vminit: %s %s done"

// Halt begins init's last line, just before it reboots the VM: the rest
// says why, and the host quotes it as the sandbox's exit reason. init's
// other lines (progress, answers) are not why a VM ended, even when they
// are the last it printed before QEMU died.
const Halt = "vminit: halt: "

// Validate reports what init could not carry out.
func (r *Request) Validate() error {
	if r.Nonce == "" || strings.ContainsAny(r.Nonce, " \n:") {
		return fmt.Errorf("nonce %q: empty or not one word", r.Nonce)
	}
	switch r.Op {
	case OpIdentity:
		if r.Identity == nil {
			return errors.New("identity: none given")
		}
		return r.Identity.Validate()
	case OpFreeze, OpThaw, OpSync:
		return nil
	}
	return fmt.Errorf("unknown op %q", r.Op)
}

// Identity is what makes a VM restored from a memory snapshot a sandbox
// of its own (OpIdentity).
type Identity struct {
	Hostname string
	Network  *Network
	Seed     []byte    // mixed into the guest kernel's random pool
	Time     time.Time // the guest's clock is set to it
}

// Validate reports what init could not apply.
func (id *Identity) Validate() error {
	switch {
	case id.Hostname == "":
		return errors.New("no hostname")
	case id.Network == nil:
		return errors.New("no network")
	case len(id.Seed) < 32:
		return fmt.Errorf("seed of %d bytes, want at least 32", len(id.Seed))
	case id.Time.IsZero():
		return errors.New("no time")
	}
	return id.Network.validate()
}

// ConfigPath is where the host puts the Config, as JSON, in the initramfs
// (a second archive appended to the first); init reads and deletes it.
const ConfigPath = "/config.json"

// The guest's disks, in the order the host attaches them: the root file
// system (ext4, read-write: a copy-on-write overlay of the template on the
// host, grown to the sandbox's disk size at boot) and the tools (ext4,
// read-only: envd and the other Binaries).
const RootDisk, ToolsDisk = "/dev/vda", "/dev/vdb"

// The initramfs layout init expects besides ConfigPath: the kernel modules
// in ModulesDir and, in ModulesOrder, their file names one a line in the
// order they load (dependencies first).
const (
	ModulesDir   = "/modules"
	ModulesOrder = ModulesDir + "/order"
)

// Validate reports what the guest's init could not boot with.
func (c *Config) Validate() error {
	if _, ok := c.Binaries[guest.EnvdPath]; !ok {
		return fmt.Errorf("no binary for envd at %s", guest.EnvdPath)
	}
	for g, src := range c.Binaries {
		if !path.IsAbs(g) || path.Clean(g) != g || g == "/" {
			return fmt.Errorf("binary guest path %q: not a clean absolute file path", g)
		}
		if rel := strings.TrimPrefix(src, "/"); rel == "" || !isLocal(rel) {
			return fmt.Errorf("binary %q for %s: not a file on the tools disk", src, g)
		}
	}
	if c.Pids < 0 {
		return fmt.Errorf("pids cap %d is negative", c.Pids)
	}
	for _, v := range c.Volumes {
		if !path.IsAbs(v) || path.Clean(v) != v || v == "/" {
			return fmt.Errorf("volume mount point %q: not a clean absolute path below /", v)
		}
	}
	if c.Network != nil {
		return c.Network.validate()
	}
	return nil
}

func (n *Network) validate() error {
	switch {
	case !n.Address.IsValid() || !n.Address.Addr().Is4():
		return fmt.Errorf("network: address %s is not an IPv4 prefix", n.Address)
	case !n.Gateway.Is4():
		return fmt.Errorf("network: gateway %s is not IPv4", n.Gateway)
	case !n.Forwarder.Is4():
		return fmt.Errorf("network: forwarder %s is not IPv4", n.Forwarder)
	case n.Address.Addr() == n.Forwarder:
		return errors.New("network: the forwarder is the guest's own address")
	}
	return nil
}

// isLocal reports whether the slash-separated path p stays within the
// directory it is relative to.
func isLocal(p string) bool {
	for _, e := range strings.Split(p, "/") {
		if e == ".." {
			return false
		}
	}
	return true
}
