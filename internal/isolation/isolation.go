// Package isolation is the contract between the sandbox manager and the
// backends that run sandboxes (jail, gvisor, vm). The manager knows nothing
// else about a backend: it starts a sandbox from a Spec, waits for envd in
// it and talks to it through Instance.Dial, offers only what the backend's
// Capabilities say it can do, and records Instance.State (and the
// backend's Name) so that a restarted server can adopt the sandbox with
// the backend that started it, or clean up after it.
//
// What every backend shares is owned outside them: networking by
// network.Host (each sandbox's namespace, veth, lease and firewall pieces;
// the backend runs the sandbox in that namespace), readiness by the
// manager (WaitEnvd), template build steps by the manager's step runner.
// A new backend is one package behind this contract plus a line of wiring
// in the server.
//
// This is the one deliberate producer-side interface in the project (the
// shape of containerd's sandbox controller); fake.go beside it is the
// hand-written fake that the manager's unit tests use.
package isolation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/network"
)

// EnvdPort is where every backend starts envd inside a sandbox and where
// the manager reaches it through Instance.Dial.
const EnvdPort = 49983

// ErrGone is returned (wrapped) when a sandbox no longer exists: it exited,
// was killed, or could not be adopted.
var ErrGone = errors.New("sandbox is gone")

// ErrPaused is returned (wrapped) by Dial while the sandbox is paused: a
// frozen process would accept the connection (the kernel completes the
// TCP handshake) and then never answer.
var ErrPaused = errors.New("sandbox is paused")

// ErrPortClosed is returned (wrapped) by Dial when nothing listens on the port.
var ErrPortClosed = errors.New("port is not open")

// ValidID reports whether id can name a sandbox on the host: backends
// derive file, cgroup, namespace and interface names from it.
func ValidID(id string) error {
	if id == "" || len(id) > 128 || strings.Trim(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != "" {
		return fmt.Errorf("invalid sandbox id %q", id)
	}
	return nil
}

// Backend starts sandboxes and finds them again after a server restart.
// A backend with background work of its own also implements io.Closer:
// the manager closes it when it closes, which ends that work (never the
// sandboxes).
type Backend interface {
	// Name is the backend's name as configured and stored ("jail", …).
	Name() string
	// Capabilities says what the backend's sandboxes can do; it never
	// changes. The manager does not call what a backend cannot do.
	Capabilities() Capabilities
	// Start creates and boots a sandbox and returns once its processes,
	// envd among them, are started; envd may not listen yet (the manager
	// waits for it: WaitEnvd). On error nothing is left behind.
	Start(ctx context.Context, spec Spec) (Instance, error)
	// Adopt reattaches to a sandbox an earlier server process started,
	// from the State its Instance reported. ErrGone if it is not alive.
	Adopt(ctx context.Context, id string, state json.RawMessage) (Instance, error)
	// Cleanup removes what a sandbox that cannot be adopted left behind
	// (processes, mounts, network namespaces, cgroups, files). It is
	// idempotent and succeeds when there is nothing left.
	Cleanup(ctx context.Context, id string, state json.RawMessage) error
}

// Capabilities are what a backend can do beyond starting, dialing,
// sampling and stopping sandboxes.
type Capabilities struct {
	// Pause: Instance.Pause and Resume freeze and thaw a sandbox with its
	// processes intact. Without it the manager refuses pause (and
	// auto-pause) requests for the backend's sandboxes.
	Pause bool
	// Export: Spec.Layers and Spec.Export are honoured, so template build
	// steps can run in the backend's sandboxes.
	Export bool
	// RootImage: the backend boots from Spec.RootImage, the template as
	// an ext4 image, rather than mounting the directory Spec.RootFS.
	RootImage bool
	// Snapshot is the richest save Instance.Snapshot makes: none, the
	// file system, or the file system with the processes and their
	// memory. A backend that makes one also starts sandboxes from it
	// (Spec.Snapshot).
	Snapshot SnapshotKind
	// Volumes: Spec.Volumes are mounted; a backend without refuses a
	// Spec that has any.
	Volumes bool
	// VolumeImages: the backend mounts a volume from its ext4 image
	// (VolumeMount.Image), with a kernel of its own, rather than a host
	// directory: the image is then the sandbox's alone while it lives
	// (or is paused), since two kernels mounting one ext4 file system
	// corrupt it. The manager holds it for the sandbox (volume.Attacher).
	VolumeImages bool
}

// SnapshotKind is what a snapshot of a sandbox holds.
type SnapshotKind int

const (
	// NoSnapshot: the backend saves nothing.
	NoSnapshot SnapshotKind = iota
	// FilesSnapshot: the file system only; a sandbox started from it
	// boots afresh over the saved files.
	FilesSnapshot
	// MemorySnapshot: the file system, the processes and their memory; a
	// sandbox started from it goes on where the saved one was.
	MemorySnapshot
)

func (k SnapshotKind) String() string {
	switch k {
	case NoSnapshot:
		return "none"
	case FilesSnapshot:
		return "files"
	case MemorySnapshot:
		return "memory"
	}
	return fmt.Sprintf("SnapshotKind(%d)", int(k))
}

// CheckSnapshot refuses a Spec.Snapshot that caps does not cover, with
// an error wrapping errors.ErrUnsupported.
func CheckSnapshot(spec Spec, caps Capabilities) error {
	if spec.Snapshot == nil {
		return nil
	}
	if k := spec.Snapshot.Kind; k == NoSnapshot || k > caps.Snapshot {
		return fmt.Errorf("starting from a %s snapshot (this backend's richest is %s): %w", k, caps.Snapshot, errors.ErrUnsupported)
	}
	return nil
}

// SnapshotSource is a snapshot a sandbox starts from (Spec.Snapshot).
type SnapshotSource struct {
	// Dir is the directory Instance.Snapshot filled, by the same backend.
	Dir  string
	Kind SnapshotKind
	// EnvdAccessToken is the token the saved envd requires, the saved
	// sandbox's at the time; the backend has envd in the new sandbox
	// take Spec.EnvdAccessToken instead.
	EnvdAccessToken string
}

// Spec is everything a backend needs to start one sandbox.
type Spec struct {
	ID string
	// RootFS is the template's read-only root file system, a directory;
	// always set. RootImage is the same file system as an ext4 image,
	// set only for a backend whose Capabilities.RootImage is true (a VM
	// boots it as the read-only backing file of a per-sandbox overlay):
	// the manager has the template cache make it (template.Builder.Ext4,
	// once per template, kept beside the directory), so a backend that
	// mounts the directory never pays for an image. Both forms are the
	// template's own files; the backend never writes to either.
	RootFS    string
	RootImage string
	EnvdPath  string // the envd binary on the host, mounted read-only
	Hostname  string
	// Resources are the sandbox's quotas, filled in by the manager.
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
	// Snapshot, when set, starts the sandbox from a snapshot of another
	// of the same template, CPU count and memory (a MemorySnapshot
	// requires them) instead of from the template alone; the sandbox
	// gets an identity of its own all the same (ID, hostname, address,
	// token, fresh randomness). A backend refuses a kind its
	// Capabilities.Snapshot does not cover.
	Snapshot *SnapshotSource

	// Volumes are the manager's volumes, each a file system of its own,
	// mounted read-write (no devices, no setuid) into the sandbox: files
	// keep the ids the sandbox gives them, as seen inside (0 is its
	// root), in every sandbox that mounts the volume.
	Volumes []VolumeMount

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

// VolumeMount is a volume and the absolute, clean path inside the
// sandbox it is mounted at. The volume is a host directory (Source), or,
// for a backend with Capabilities.VolumeImages, its ext4 image (Image).
type VolumeMount struct {
	Source string
	Image  string
	Target string
}

// CheckVolumes refuses Spec.Volumes that caps does not cover, or that do
// not give each volume in the form caps asks for, at a clean absolute
// path other than the root.
func CheckVolumes(spec Spec, caps Capabilities) error {
	if len(spec.Volumes) > 0 && !caps.Volumes {
		return fmt.Errorf("volumes: %w", errors.ErrUnsupported)
	}
	for _, v := range spec.Volumes {
		switch {
		case !path.IsAbs(v.Target) || path.Clean(v.Target) != v.Target || v.Target == "/":
			return fmt.Errorf("volume mount point %q is not a clean path below /", v.Target)
		case caps.VolumeImages && (v.Image == "" || v.Source != ""):
			return fmt.Errorf("volume at %s: this backend mounts a volume's image, and the spec gives %q", v.Target, v.Source+v.Image)
		case !caps.VolumeImages && (v.Source == "" || v.Image != ""):
			return fmt.Errorf("volume at %s: this backend mounts a volume's host directory, and the spec gives %q", v.Target, v.Source+v.Image)
		}
	}
	return nil
}

// Resources are the sandbox's quotas. CPUCount, MemoryMB and DiskSizeMB
// are always set (the manager's defaults fill what a template leaves
// out); a zero Pids is the backend's default, which depends on how it
// isolates.
type Resources struct {
	CPUCount   int
	MemoryMB   int
	DiskSizeMB int
	Pids       int
	// DiskIO caps the sandbox's I/O on its own disk. Its zero fields are
	// no cap: the manager fills in the operator's defaults.
	DiskIO DiskIO
}

// Check reports the first quota a backend cannot start a sandbox with.
func (r Resources) Check() error {
	switch {
	case r.CPUCount <= 0:
		return fmt.Errorf("resources: CPU count %d is not positive", r.CPUCount)
	case r.MemoryMB <= 0:
		return fmt.Errorf("resources: memory %d MiB is not positive", r.MemoryMB)
	case r.DiskSizeMB <= 0:
		return fmt.Errorf("resources: disk size %d MiB is not positive", r.DiskSizeMB)
	case r.Pids < 0:
		return fmt.Errorf("resources: pids %d is negative", r.Pids)
	}
	return nil
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
	// Only a backend with Capabilities.Pause implements them; the others
	// return an error wrapping errors.ErrUnsupported.
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
	// Snapshot saves the sandbox into dir, an empty directory the caller
	// owns and later removes, as a snapshot of kind (at most the
	// backend's Capabilities.Snapshot), at one consistent point: writes
	// in flight are in or out, never torn. The sandbox is frozen for the
	// time it takes and then runs on (or stays paused, if it was). The
	// directory's format is the backend's own; only a Spec.Snapshot of
	// the same backend reads it. A backend without snapshots returns an
	// error wrapping errors.ErrUnsupported.
	Snapshot(ctx context.Context, dir string, kind SnapshotKind) error
	// Stats samples resource use.
	Stats(ctx context.Context) (Stats, error)
	// Link is the sandbox's network link on the host, as network.Host's
	// Setup gave it; the zero Link when the sandbox has only loopback.
	Link() network.Link
	// Done is closed when the sandbox stops by itself (its init or envd
	// died, or the kernel killed it); Exit then says why.
	Done() <-chan struct{}
	Exit() Exit
	// Stop kills every process and removes everything the sandbox used.
	// It is idempotent.
	Stop(ctx context.Context) error
}

// GuestLogger is an Instance whose backend keeps what the sandbox's init
// and envd print (envd's lines as its slog text, alone or after
// "envd: ") in a file on the host, appended to while the instance runs
// and removed by Stop: the manager reads envd's lines from it into the
// sandbox's own log.
type GuestLogger interface {
	GuestLog() string
}

// Halter is an Instance that can end every process of its sandbox apart
// from the rest of Stop: a kill is answered once nothing in the sandbox
// runs, and Stop (network, cgroup, disk) follows in the background.
type Halter interface {
	// Halt kills every process of the sandbox and waits until they have
	// exited; Done is closed when it returns nil. Stop is still due.
	Halt(ctx context.Context) error
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
