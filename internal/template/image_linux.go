package template

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/template/oci"
)

// A template FromImage is a derived template whose From is the image: the
// image is unpacked once per image digest into the image cache, and its
// root filesystem is then the bottom layer of the build, shared by hard
// links like a From template's.
//
//	templates/.images/<hex>/rootfs       the unpacked image, read-only
//	templates/.images/<hex>/image.json   what it was pulled as and its defaults: the completion marker
//	templates/.images/<hex>.lock         flock held while unpacking
//	templates/.images/.tmp/              unpacks in progress, and OCI layout blobs
//
// <hex> is the digest of the image's configuration, which names its layers
// by content: the same image pulled by another tag, from another registry
// or loaded from a tarball is not unpacked again.

// imageMeta is what image.json records.
type imageMeta struct {
	Ref       string        `json:"ref"`
	Digest    string        `json:"digest"`
	Config    oci.Config    `json:"config"`
	User      string        `json:"user"`
	Workdir   string        `json:"workdir"`
	Unpacked  time.Time     `json:"unpacked"`
	Took      time.Duration `json:"took"`
	SizeBytes int64         `json:"size_bytes"`
}

const imageMetaFile = "image.json"

func (b *Builder) imagesDir() string { return filepath.Join(b.templatesDir(), ".images") }

// imageBase returns the image ref as the template a derived build starts
// from, pulling and unpacking it unless its digest is in the cache. The
// registry is asked every time, so a tag that moved is followed.
func (b *Builder) imageBase(ctx context.Context, ref string, auth *oci.Auth) (_ *Template, err error) {
	log := b.logger().With("image", ref)
	tmpRoot := filepath.Join(b.imagesDir(), ".tmp")
	if err := os.MkdirAll(tmpRoot, 0o700); err != nil {
		return nil, err
	}
	im, err := oci.Open(ctx, ref, oci.Options{Auth: auth, TempDir: tmpRoot, Transport: b.RegistryTransport})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, im.Close()) }()
	hex := im.Digest.Hex
	dir := filepath.Join(b.imagesDir(), hex)
	if t, err := readImage(dir); !errors.Is(err, fs.ErrNotExist) {
		return t, err
	}
	unlock, err := lockFile(ctx, dir+".lock")
	if err != nil {
		return nil, fmt.Errorf("locking image %s: %w", im.Digest, err)
	}
	defer unlock()
	if t, err := readImage(dir); !errors.Is(err, fs.ErrNotExist) {
		return t, err
	}
	if err := removeLeftovers(log, tmpRoot, hex[:16]+"-", dir); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(tmpRoot, hex[:16]+"-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if rerr := removeTree(tmp); rerr != nil { // gone after the rename
			err = errors.Join(err, rerr)
		}
	}()

	start := time.Now()
	rep := newReporter(b.Progress, "image", 1, b.OnProgress)
	rep.startStage("unpack " + shorten(ref, 60))
	rep.update(Event{Phase: "unpacking", Percent: -1})
	defer func() {
		if err != nil {
			rep.finish("unpacking failed after " + time.Since(start).Round(time.Millisecond).String())
		}
	}()
	log.Info("unpacking image", "digest", im.Digest.String())
	rootfs := filepath.Join(tmp, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return nil, err
	}
	if err := im.Unpack(ctx, rootfs); err != nil {
		return nil, err
	}
	m := imageMeta{Ref: ref, Digest: im.Digest.String(), Config: im.Config, Unpacked: time.Now().UTC()}
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return nil, err
	}
	m.User, m.Workdir = imageDefaults(log, root.ReadFile, im.Config)
	root.Close()
	if m.SizeBytes, _, err = diskUsage(rootfs); err != nil {
		return nil, fmt.Errorf("measuring image: %w", err)
	}
	m.Took = time.Since(start).Round(time.Millisecond)
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, imageMetaFile), append(data, '\n'), 0o644); err != nil {
		return nil, err
	}
	if err := syncFS(tmp); err != nil {
		return nil, fmt.Errorf("syncing image: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, fmt.Errorf("moving image into place: %w", err)
	}
	log.Info("image unpacked", "digest", m.Digest, "took", m.Took, "size_bytes", m.SizeBytes)
	rep.finish(fmt.Sprintf("unpacked %s in %s (%s)", ref, m.Took.Round(time.Millisecond), humanBytes(m.SizeBytes)))
	return readImage(dir)
}

// readImage loads an unpacked image as a template to build on. A
// directory without image.json is an unfinished unpack: fs.ErrNotExist.
func readImage(dir string) (*Template, error) {
	data, err := os.ReadFile(filepath.Join(dir, imageMetaFile))
	if err != nil {
		return nil, err
	}
	var m imageMeta
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("reading image metadata %s: %w", dir, err)
	}
	env := map[string]string{}
	for _, kv := range m.Config.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && envKeyRE.MatchString(k) {
			env[k] = v
		}
	}
	hex := filepath.Base(dir)
	return &Template{
		Name: m.Ref, ID: m.Ref + "@sha256:" + hex[:12], Hash: hex, RootFS: filepath.Join(dir, "rootfs"),
		User: m.User, Workdir: m.Workdir, Env: env,
		BuiltAt: m.Unpacked, BuildDuration: m.Took, SizeBytes: m.SizeBytes, BuilderVersion: BuilderVersion,
	}, nil
}

// imageDefaults returns the default user and workdir of templates built
// from an image with cfg: its USER when /etc/passwd names it (by name or
// uid), else root; its WORKDIR, else that user's home, else /.
func imageDefaults(log *slog.Logger, readFile func(string) ([]byte, error), cfg oci.Config) (user, workdir string) {
	user = "root"
	if name, _, _ := strings.Cut(cfg.User, ":"); name != "" {
		if o, err := resolveOwner(readFile, name); err == nil && userRE.MatchString(o.Name) {
			user = o.Name
		} else {
			log.Warn("the image's user has no /etc/passwd entry; the templates' default user is root", "user", cfg.User)
		}
	}
	home := ""
	if o, err := resolveOwner(readFile, user); err == nil && path.IsAbs(o.Home) {
		home = path.Clean(o.Home)
	}
	wd := ""
	if path.IsAbs(cfg.WorkingDir) {
		wd = path.Clean(cfg.WorkingDir)
	}
	return user, cmp.Or(wd, home, "/")
}
