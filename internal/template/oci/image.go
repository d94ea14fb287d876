package oci

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Platform is the one platform images are pulled for and must be built for:
// the host's, since sandboxes run the image's binaries natively.
var Platform = v1.Platform{OS: "linux", Architecture: "amd64"}

// The transport prefixes of local tarballs.
const (
	DockerArchive = "docker-archive:"
	OCIArchive    = "oci-archive:"
)

// Auth is a user name and password for a registry's basic or token
// authentication.
type Auth struct {
	Username string
	Password string
}

// Config is what a template takes from an image's configuration.
type Config struct {
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"workingDir,omitempty"`
	User       string   `json:"user,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
}

// Options are how Open fetches an image.
type Options struct {
	// Auth, when not nil, is sent to the registry; nil pulls anonymously.
	Auth *Auth
	// TempDir holds the blobs of an OCI layout tarball while the image is
	// open; empty means os.TempDir(). Put it on the disk the image is
	// unpacked to: the blobs are as large as the compressed image.
	TempDir string
	// Limits bound the image; zero fields take DefaultLimits'.
	Limits Limits
	// Transport carries the registry requests and the redirects they
	// follow; nil is http.DefaultTransport. A server pulling for an API
	// caller passes one that refuses private and host addresses (package
	// fetch).
	Transport http.RoundTripper
}

// Image is an image opened for unpacking; Close releases it.
type Image struct {
	// Ref is the reference it was opened by.
	Ref string
	// Digest is the digest of its configuration ("sha256:<hex>"), the
	// image ID: it names the layers (by the digests of their contents) and
	// the settings, so it is the same whatever registry, tag or tarball the
	// image came from.
	Digest v1.Hash
	// Config is its configuration.
	Config Config

	img    v1.Image
	limits Limits
	close  func() error
}

// ArchivePath returns the tarball path ref names, when it has a tarball's
// transport prefix.
func ArchivePath(ref string) (string, bool) {
	for _, p := range []string{DockerArchive, OCIArchive} {
		if rest, ok := strings.CutPrefix(ref, p); ok {
			return rest, true
		}
	}
	return "", false
}

// CheckRef reports what is wrong with ref as an image reference, without
// any I/O: a tarball's path must be absolute and clean, anything else must
// parse as a registry reference.
func CheckRef(ref string) error {
	if p, ok := ArchivePath(ref); ok {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return fmt.Errorf("image tarball %q: want a clean absolute path", p)
		}
		return nil
	}
	if _, err := name.ParseReference(ref); err != nil {
		return fmt.Errorf("image reference %q: %w", ref, err)
	}
	return nil
}

// Open fetches the manifest and configuration of the image ref names
// (see the package documentation), for linux/amd64; the layers are read
// by Unpack. A registry is reached from this process, with ctx bounding
// every request Open and Unpack make.
func Open(ctx context.Context, ref string, opts Options) (_ *Image, err error) {
	if err := CheckRef(ref); err != nil {
		return nil, err
	}
	im := &Image{Ref: ref, limits: opts.Limits.withDefaults(), close: func() error { return nil }}
	if p, ok := ArchivePath(ref); ok {
		im.img, im.close, err = openArchive(p, opts.TempDir, im.limits)
	} else {
		im.img, err = openRemote(ctx, ref, opts.Auth, opts.Transport)
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			im.Close()
		}
	}()
	cf, err := im.img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image %s: reading its configuration: %w", ref, err)
	}
	if cf.OS != Platform.OS || cf.Architecture != Platform.Architecture {
		return nil, fmt.Errorf("image %s is for %s/%s; only %s images can run here", ref, cf.OS, cf.Architecture, Platform)
	}
	if im.Digest, err = im.img.ConfigName(); err != nil {
		return nil, fmt.Errorf("image %s: %w", ref, err)
	}
	c := cf.Config
	im.Config = Config{Env: c.Env, WorkingDir: c.WorkingDir, User: c.User, Entrypoint: c.Entrypoint, Cmd: c.Cmd}
	return im, nil
}

// Close releases what Open holds: the blobs of an OCI layout tarball.
func (im *Image) Close() error { return im.close() }

func openRemote(ctx context.Context, ref string, auth *Auth, t http.RoundTripper) (v1.Image, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("image reference %q: %w", ref, err)
	}
	var a authn.Authenticator = authn.Anonymous
	if auth != nil {
		a = &authn.Basic{Username: auth.Username, Password: auth.Password}
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuth(a),
		remote.WithPlatform(Platform), remote.WithUserAgent("agent-sandbox")}
	if t != nil {
		opts = append(opts, remote.WithTransport(t))
	}
	img, err := remote.Image(r, opts...)
	if err != nil {
		return nil, fmt.Errorf("pulling %s: %w", ref, err)
	}
	return img, nil
}

// tempDir is dir, or the system's temporary directory.
func tempDir(dir string) string {
	if dir == "" {
		return os.TempDir()
	}
	return dir
}
