package oci

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// openArchive opens the image in the tarball at p: `docker save` output
// (a manifest.json; newer Dockers write an OCI layout beside it) is read in
// place; an OCI layout is extracted into a directory under tmp first, as
// go-containerregistry reads layouts from directories.
func openArchive(p, tmp string, lim Limits) (v1.Image, func() error, error) {
	noop := func() error { return nil }
	top, err := topLevelFiles(p)
	if err != nil {
		return nil, nil, fmt.Errorf("reading image tarball %s: %w", p, err)
	}
	switch {
	case top["manifest.json"]:
		img, err := tarball.ImageFromPath(p, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("reading docker image tarball %s: %w", p, err)
		}
		return img, noop, nil
	case top["index.json"]:
		dir, err := os.MkdirTemp(tempDir(tmp), "oci-layout-")
		if err != nil {
			return nil, nil, err
		}
		cleanup := func() error { return os.RemoveAll(dir) }
		img, err := extractLayout(p, dir, lim)
		if err != nil {
			return nil, nil, errors.Join(fmt.Errorf("reading OCI image tarball %s: %w", p, err), cleanup())
		}
		return img, cleanup, nil
	}
	return nil, nil, fmt.Errorf("%s is neither a `docker save` tarball (no manifest.json) nor an OCI image layout (no index.json)", p)
}

// topLevelFiles returns the names of the regular files at the top of the
// tarball at p.
func topLevelFiles(p string) (map[string]bool, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names := map[string]bool{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return names, nil
		}
		if err != nil {
			return nil, err
		}
		if n := path.Clean(hdr.Name); hdr.Typeflag == tar.TypeReg && !path.IsAbs(n) && path.Dir(n) == "." {
			names[n] = true
		}
	}
}

// blobRE matches the files of an OCI layout that go-containerregistry
// reads; nothing else of the tarball is extracted.
var blobRE = regexp.MustCompile(`^(oci-layout|index\.json|blobs/[a-z0-9]+/[a-f0-9]{32,128})$`)

// extractLayout extracts the OCI layout in the tarball at p into dir and
// returns its linux/amd64 image.
func extractLayout(p, dir string, lim Limits) (v1.Image, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	var total int64
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		n := path.Clean(hdr.Name)
		if hdr.Typeflag != tar.TypeReg || !blobRE.MatchString(n) {
			continue
		}
		if total += hdr.Size; total > lim.MaxBytes {
			return nil, fmt.Errorf("%w: blobs of more than %d bytes", ErrTooLarge, lim.MaxBytes)
		}
		if err := root.MkdirAll(path.Dir(n), 0o700); err != nil {
			return nil, err
		}
		out, err := root.OpenFile(n, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return nil, err
		}
		_, err = io.Copy(out, tr)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("extracting %s: %w", n, err)
		}
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, err
	}
	return selectImage(idx)
}

// selectImage returns the linux/amd64 image of an index, looking into
// nested indexes. An image without a platform in the index is taken when
// it is the only one (its configuration says its platform).
func selectImage(idx v1.ImageIndex) (v1.Image, error) {
	var anon []v1.Image
	img, err := findPlatform(idx, &anon)
	if err != nil || img != nil {
		return img, err
	}
	if len(anon) == 1 {
		return anon[0], nil
	}
	return nil, fmt.Errorf("the index has no %s image", Platform)
}

// findPlatform returns the first image of idx (or of an index in it) for
// Platform, or nil, and adds the images it met that have no platform to
// anon.
func findPlatform(idx v1.ImageIndex, anon *[]v1.Image) (v1.Image, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range m.Manifests {
		switch {
		case d.MediaType.IsIndex():
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return nil, err
			}
			if img, err := findPlatform(child, anon); err != nil || img != nil {
				return img, err
			}
		case d.MediaType.IsImage() && d.Platform == nil:
			img, err := idx.Image(d.Digest)
			if err != nil {
				return nil, err
			}
			*anon = append(*anon, img)
		case d.MediaType.IsImage() && d.Platform.Satisfies(Platform):
			return idx.Image(d.Digest)
		}
	}
	return nil, nil
}
