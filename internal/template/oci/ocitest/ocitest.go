// Package ocitest builds small images for tests, writes them as tarballs and
// serves them from an in-memory registry on loopback. It is imported only
// by tests.
package ocitest

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TarDir returns a layer tarball of the tree at dir, with owners and modes.
func TarDir(dir string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h.Name = filepath.ToSlash(rel)
		h.Uname, h.Gname = "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(tw, f)
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Image returns a linux/amd64 image of the layer tarballs (bottom first)
// with cfg, its layers gzipped as a registry holds them.
func Image(cfg v1.Config, layers ...[]byte) (v1.Image, error) {
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{OS: "linux", Architecture: "amd64", Config: cfg})
	if err != nil {
		return nil, err
	}
	for _, data := range layers {
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(data)), nil
		})
		if err != nil {
			return nil, err
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			return nil, err
		}
	}
	return img, nil
}

// Registry starts an in-memory registry on 127.0.0.1 for the test and
// returns its host:port. With user set, it wants that user and password
// (HTTP basic authentication) on every request.
func Registry(t testing.TB, user, password string) string {
	t.Helper()
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if user != "" {
		reg := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, p, ok := r.BasicAuth(); !ok || u != user || p != password {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			reg.ServeHTTP(w, r)
		})
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// Push puts img into the registry at ref.
func Push(ref string, img v1.Image, user, password string) error {
	r, err := name.ParseReference(ref)
	if err != nil {
		return err
	}
	var auth authn.Authenticator = authn.Anonymous
	if user != "" {
		auth = &authn.Basic{Username: user, Password: password}
	}
	return remote.Write(r, img, remote.WithAuth(auth))
}

// WriteDockerArchive writes img as `docker save` does, tagged ref.
func WriteDockerArchive(path, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	return tarball.WriteToFile(path, tag, img)
}

// WriteOCIArchive writes img, for linux/amd64, as a tarball of an OCI
// image layout.
func WriteOCIArchive(path string, img v1.Image) error {
	dir, err := os.MkdirTemp("", "ocitest-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	l, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := l.AppendImage(img, layout.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"})); err != nil {
		return err
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(out)
	if err := tw.AddFS(os.DirFS(dir)); err != nil {
		out.Close()
		return fmt.Errorf("writing OCI layout tarball: %w", err)
	}
	if err := tw.Close(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
