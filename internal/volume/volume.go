// Package volume keeps E2B's volumes: named file trees that outlive every
// sandbox, mounted read-write into the sandboxes that name them at create
// (isolation.Spec.Volumes) and read and written without any sandbox
// through the volume content API (content.go). A volume's files live in a
// Storage, which gives them as a directory on the host: ImageStorage
// keeps each volume in an ext4 image of a fixed size (the cap) under the
// data dir, mounted while the server runs; another Storage (an object
// store behind a FUSE mount, say) can replace it. A sandbox with a kernel
// of its own (a VM) mounts the image itself instead, which ImageStorage
// lends it alone (Attacher): the host lets go of the volume meanwhile,
// and the content API answers ErrInUse. The records (ID, name, size) are
// the store's; the content API's callers present tokens this package
// signs (token.go).
package volume

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"

	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// Storage holds the files of volumes.
type Storage interface {
	// Create makes volume id's storage, empty, holding at most size
	// bytes; its root is writable by every user of a sandbox.
	Create(ctx context.Context, id string, size int64) error
	// Path returns the host directory holding volume id's files, making
	// it available first when it is not (a mount).
	Path(ctx context.Context, id string) (string, error)
	// Remove deletes volume id's storage and every file in it; nothing
	// left is no error.
	Remove(ctx context.Context, id string) error
	// List returns the IDs of the volumes it holds.
	List(ctx context.Context) ([]string, error)
}

// Attacher is a Storage that can lend a volume, as an ext4 image, to one
// holder at a time: a VM sandbox, whose own kernel mounts it. While it is
// lent the host does not mount it (Path refuses, with ErrInUse): two
// kernels mounting one ext4 file system, each caching it as its own,
// corrupt it.
type Attacher interface {
	// Attach lends volume id's image to holder and returns its path, once
	// the host has let go of it. Attaching it again to the same holder is
	// no error; to another, ErrInUse naming the one that has it.
	Attach(ctx context.Context, id, holder string) (string, error)
	// Detach ends holder's loan of volume id; none is no error.
	Detach(ctx context.Context, id, holder string) error
	// Attached returns the holder of each volume lent, by volume ID.
	Attached(ctx context.Context) (map[string]string, error)
}

// Errors the API maps to statuses; the errors of this package wrap them.
var (
	ErrNotFound = errors.New("volume not found")
	ErrExists   = errors.New("volume exists")
	ErrInvalid  = errors.New("invalid volume request")
	ErrInUse    = errors.New("volume in use")
)

// Records are the store's volume methods; *store.Store implements them.
type Records interface {
	CreateVolume(ctx context.Context, v store.Volume) (store.Volume, error)
	GetVolume(ctx context.Context, id string) (store.Volume, error)
	VolumeByName(ctx context.Context, name string) (store.Volume, error)
	ListVolumes(ctx context.Context) ([]store.Volume, error)
	DeleteVolume(ctx context.Context, id string) error
}

var _ Records = (*store.Store)(nil)

// Service manages volumes: records, storage and tokens.
type Service struct {
	records Records
	storage Storage
	size    int64
	tokens  *tokens
}

// Config wires a Service.
type Config struct {
	Records Records
	Storage Storage
	// Size is each new volume's capacity, in bytes.
	Size int64
	// KeyFile holds the key tokens are signed with; made (0600) when
	// missing, so tokens outlive a restart.
	KeyFile string
}

// New returns a Service for cfg.
func New(cfg Config) (*Service, error) {
	if cfg.Records == nil || cfg.Storage == nil || cfg.Size <= 0 || cfg.KeyFile == "" {
		return nil, errors.New("volumes: records, storage, a size and a key file are required")
	}
	t, err := loadTokens(cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("volumes: %w", err)
	}
	return &Service{records: cfg.Records, storage: cfg.Storage, size: cfg.Size, tokens: t}, nil
}

// nameRE is E2B's rule for volume names.
var nameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// Create makes an empty volume named name and returns it with a token
// for its content. Its storage exists before its record, so a crash
// leaves at worst storage that no record names.
func (s *Service) Create(ctx context.Context, name string) (store.Volume, string, error) {
	if !nameRE.MatchString(name) || len(name) > 128 {
		//lint:ignore ST1005 E2B's own message, which its SDKs show as it is
		return store.Volume{}, "", fmt.Errorf("Invalid volume name: %q: use 1 to 128 of a-z, A-Z, 0-9, '_' and '-': %w", name, ErrInvalid)
	}
	if _, err := s.records.VolumeByName(ctx, name); err == nil {
		//lint:ignore ST1005 E2B's own message, which its SDKs show as it is
		return store.Volume{}, "", fmt.Errorf("Volume with name '%s' already exists: %w", name, ErrExists)
	} else if !errors.Is(err, store.ErrNotFound) {
		return store.Volume{}, "", err
	}
	id := newUUID()
	if err := s.storage.Create(ctx, id, s.size); err != nil {
		return store.Volume{}, "", fmt.Errorf("creating volume %s: %w", name, err)
	}
	v, err := s.records.CreateVolume(ctx, store.Volume{ID: id, Name: name, SizeBytes: s.size})
	if err != nil {
		if rerr := s.storage.Remove(context.WithoutCancel(ctx), id); rerr != nil {
			err = errors.Join(err, rerr)
		}
		if errors.Is(err, store.ErrExists) {
			//lint:ignore ST1005 E2B's own message, which its SDKs show as it is
			return store.Volume{}, "", fmt.Errorf("Volume with name '%s' already exists: %w", name, ErrExists)
		}
		return store.Volume{}, "", fmt.Errorf("creating volume %s: %w", name, err)
	}
	return v, s.tokens.issue(id), nil
}

// Get returns volume id with a fresh token.
func (s *Service) Get(ctx context.Context, id string) (store.Volume, string, error) {
	v, err := s.get(ctx, id)
	if err != nil {
		return store.Volume{}, "", err
	}
	return v, s.tokens.issue(id), nil
}

func (s *Service) get(ctx context.Context, id string) (store.Volume, error) {
	v, err := s.records.GetVolume(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		//lint:ignore ST1005 E2B's own message, which its SDKs show as it is
		return store.Volume{}, fmt.Errorf("Volume %s not found: %w", id, ErrNotFound)
	}
	return v, err
}

// List returns every volume.
func (s *Service) List(ctx context.Context) ([]store.Volume, error) {
	return s.records.ListVolumes(ctx)
}

// Delete removes volume id and its files, unless a live sandbox mounts it
// (ErrInUse).
func (s *Service) Delete(ctx context.Context, id string) error {
	v, err := s.get(ctx, id)
	if err != nil {
		return err
	}
	if err := s.records.DeleteVolume(ctx, id); errors.Is(err, store.ErrInUse) {
		return fmt.Errorf("volume '%s' is mounted by running or paused sandboxes; kill them first: %w", v.Name, ErrInUse)
	} else if err != nil {
		return err
	}
	if err := s.storage.Remove(ctx, id); err != nil {
		return fmt.Errorf("removing volume %s: %w", v.Name, err)
	}
	return nil
}

// Path returns the host directory of the volume named name, for a
// sandbox to mount (ErrNotFound when there is none; ErrInUse while it is
// attached to a sandbox).
func (s *Service) Path(ctx context.Context, name string) (string, error) {
	v, err := s.records.VolumeByName(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return "", fmt.Errorf("volume '%s' not found: %w", name, ErrNotFound)
	}
	if err != nil {
		return "", err
	}
	return s.storage.Path(ctx, v.ID)
}

// Attach lends the volume named name to holder, a sandbox that mounts it
// as a disk of its own (Attacher), and returns its image. ErrNotFound
// when there is none; ErrInUse while another holds it, or a sandbox on
// the host mounts it.
func (s *Service) Attach(ctx context.Context, name, holder string) (string, error) {
	a, ok := s.storage.(Attacher)
	if !ok {
		return "", fmt.Errorf("attaching volume '%s': this server's volume storage keeps no images to attach: %w", name, errors.ErrUnsupported)
	}
	v, err := s.records.VolumeByName(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return "", fmt.Errorf("volume '%s' not found: %w", name, ErrNotFound)
	}
	if err != nil {
		return "", err
	}
	image, err := a.Attach(ctx, v.ID, holder)
	if err != nil {
		return "", fmt.Errorf("attaching volume '%s': %w", name, err)
	}
	return image, nil
}

// Detach ends holder's hold on the volume named name (Attach); a volume
// that is gone, or not held by holder, is no error.
func (s *Service) Detach(ctx context.Context, name, holder string) error {
	a, ok := s.storage.(Attacher)
	if !ok {
		return nil // nothing was attached
	}
	v, err := s.records.VolumeByName(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil // deleted: its storage, loan included, is gone
	}
	if err != nil {
		return err
	}
	if err := a.Detach(ctx, v.ID, holder); err != nil {
		return fmt.Errorf("detaching volume '%s': %w", name, err)
	}
	return nil
}

// Attachments returns the holder of each volume attached (Attach), by
// volume name.
func (s *Service) Attachments(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	a, ok := s.storage.(Attacher)
	if !ok {
		return out, nil
	}
	byID, err := a.Attached(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing attached volumes: %w", err)
	}
	for id, holder := range byID {
		v, err := s.records.GetVolume(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			continue // storage without a record: Sweep's
		}
		if err != nil {
			return nil, err
		}
		out[v.Name] = holder
	}
	return out, nil
}

// Open checks token for volume id and returns the root of its files,
// which the caller closes.
func (s *Service) Open(ctx context.Context, id, token string) (*os.Root, error) {
	if err := s.tokens.verify(token, id); err != nil {
		return nil, err
	}
	if _, err := s.get(ctx, id); err != nil {
		return nil, err
	}
	dir, err := s.storage.Path(ctx, id)
	if err != nil {
		return nil, err
	}
	return os.OpenRoot(dir)
}

// newUUID returns a random (version 4) UUID: E2B's volume IDs are UUIDs.
func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// orphanRemover is a Storage that can find, beside its own volumes, what
// no storage owns any more in a place it shares with others (the host's
// volume mounts), and remove it.
type orphanRemover interface {
	RemoveOrphans(ctx context.Context) error
}

// Sweep removes the storage that no record names: what a crash left
// between making a volume's storage and recording it, or between
// deleting the record and the storage; and, where the storage is an
// orphanRemover, what no storage owns any more.
func (s *Service) Sweep(ctx context.Context) error {
	ids, err := s.storage.List(ctx)
	if err != nil {
		return fmt.Errorf("listing volume storage: %w", err)
	}
	var errs []error
	if o, ok := s.storage.(orphanRemover); ok {
		if err := o.RemoveOrphans(ctx); err != nil {
			errs = append(errs, fmt.Errorf("removing orphaned volume mounts: %w", err))
		}
	}
	for _, id := range ids {
		if _, err := s.records.GetVolume(ctx, id); !errors.Is(err, store.ErrNotFound) {
			errs = append(errs, err) // nil when it is known
			continue
		}
		errs = append(errs, s.storage.Remove(ctx, id))
	}
	return errors.Join(errs...)
}
