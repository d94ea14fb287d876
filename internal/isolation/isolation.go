// Package isolation is the contract between the sandbox manager and the
// backends that run sandboxes (jail, gvisor, vm). The manager knows nothing
// else about a backend: it starts a sandbox from a Spec, talks to envd in it
// through Instance.Dial, and records Instance.State so that a restarted
// server can adopt the sandbox or clean up after it.
//
// This is the one deliberate producer-side interface in the project (the
// shape of containerd's sandbox controller); fake.go beside it is the
// hand-written fake that the manager's unit tests use.
package isolation

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"time"
)

// ErrGone is returned (wrapped) when a sandbox no longer exists: it exited,
// was killed, or could not be adopted.
var ErrGone = errors.New("sandbox is gone")

// ErrPortClosed is returned (wrapped) by Dial when nothing listens on the port.
var ErrPortClosed = errors.New("port is not open")

// Backend starts sandboxes and finds them again after a server restart.
type Backend interface {
	// Name is the backend's name as configured and stored ("jail", …).
	Name() string
	// Start creates and boots a sandbox; envd is listening when it returns.
	// On error nothing is left behind.
	Start(ctx context.Context, spec Spec) (Instance, error)
	// Adopt reattaches to a sandbox an earlier server process started,
	// from the State its Instance reported. ErrGone if it is not alive.
	Adopt(ctx context.Context, id string, state json.RawMessage) (Instance, error)
	// Cleanup removes what a sandbox that cannot be adopted left behind
	// (processes, mounts, network namespaces, cgroups, files). It is
	// idempotent and succeeds when there is nothing left.
	Cleanup(ctx context.Context, id string, state json.RawMessage) error
}

// Spec is everything a backend needs to start one sandbox.
type Spec struct {
	ID        string
	RootFS    string // the template's read-only root filesystem
	EnvdPath  string // the envd binary on the host, mounted read-only
	Hostname  string
	Resources Resources
	// Tools are further host binaries to mount read-only into the
	// sandbox: guest path → host path (the code interpreter server).
	Tools map[string]string
	// EnvdAccessToken is what envd requires from its first request. The
	// backend hands it over where no process in the sandbox can read it
	// (not envd's command line or environment). Empty: envd starts open,
	// until /init sets one.
	EnvdAccessToken string

	// Layers are further read-only directories stacked over RootFS, top
	// first, as overlayfs lower layers: a template build step runs over
	// the layers the steps before it made. Like RootFS they hold files
	// with the template's own ids.
	Layers []string
	// Export, when set, is an empty host directory that receives the
	// sandbox's file system changes when it stops (Instance.Stop, before
	// the sandbox's disk is discarded): what a build step made, as a
	// plain overlayfs upper directory over RootFS and Layers. Files
	// carry the ids they have inside the sandbox (not the host ids of a
	// user namespace); a deletion is a whiteout (a 0/0 character device)
	// and a directory that replaced a lower one is opaque (xattr
	// trusted.overlay.opaque "y"); no redirects, no metacopy. Paths the
	// backend itself placed in the sandbox (envd's mount point,
	// /etc/resolv.conf) are left out. A backend that cannot export
	// refuses a Spec with Export set.
	Export string
}

// Resources are the sandbox's quotas. Zero means the backend's default.
type Resources struct {
	CPUCount   int
	MemoryMB   int
	DiskSizeMB int
	Pids       int
	// DiskIO caps the sandbox's I/O on its own disk. Its zero fields are
	// no cap: the manager fills in the operator's defaults.
	DiskIO DiskIO
}

// DiskIO is a disk I/O quota, each way; zero is no cap.
type DiskIO struct {
	ReadBytesPerSec, WriteBytesPerSec uint64
	ReadIOPS, WriteIOPS               uint64
}

// Instance is one running (or paused) sandbox.
type Instance interface {
	// State is what Adopt and Cleanup need; the manager persists it.
	State() json.RawMessage
	// Dial reaches a TCP port inside the sandbox, including services that
	// listen only on its loopback. ErrPortClosed when nothing listens.
	Dial(ctx context.Context, port int) (net.Conn, error)
	// Pause freezes every process; Resume thaws them with pids intact.
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
	// Stats samples resource use.
	Stats(ctx context.Context) (Stats, error)
	// Link is the sandbox's network link on the host; the zero Link when
	// the sandbox has only loopback.
	Link() Link
	// Done is closed when the sandbox stops by itself (its init or envd
	// died, or the kernel killed it); Exit then says why.
	Done() <-chan struct{}
	Exit() Exit
	// Stop kills every process and removes everything the sandbox used.
	// It is idempotent.
	Stop(ctx context.Context) error
}

// Link is a sandbox's network attachment as the host sees it: the host
// serves the sandbox's DNS and egress proxy on Gateway and applies its
// firewall rules and bandwidth caps to HostIf.
type Link struct {
	HostIf  string     // the host end of its veth
	Gateway netip.Addr // the host's address on it: the sandbox's route and nameserver
	Address netip.Addr // the sandbox's address
}

// Stats is one resource sample.
type Stats struct {
	Time        time.Time
	CPUCount    int
	CPUUsedPct  float64
	MemUsed     uint64
	MemTotal    uint64
	MemCache    uint64
	DiskUsed    uint64
	DiskTotal   uint64
	OOMKills    uint64
	ProcessesUp int
}

// Exit says why a sandbox stopped by itself.
type Exit struct {
	OOM    bool   // the memory limit was hit
	Reason string // human-readable detail
}
