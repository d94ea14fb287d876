package oci

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/agent-sandbox/agent-sandbox/internal/fetch"
	"github.com/agent-sandbox/agent-sandbox/internal/template/oci/ocitest"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

func TestCheckRef(t *testing.T) {
	for ref, ok := range map[string]bool{
		"alpine":                true,
		"alpine:3.20":           true,
		"127.0.0.1:5000/a/b:v1": true,
		"ghcr.io/o/r@sha256:" + strings.Repeat("a", 64): true,
		"docker-archive:/srv/img.tar":                   true,
		"oci-archive:/srv/img.tar":                      true,
		"docker-archive:img.tar":                        false,
		"oci-archive:/srv/../img.tar":                   false,
		"UPPER/case":                                    false,
		"a b":                                           false,
		"":                                              false,
	} {
		if err := CheckRef(ref); (err == nil) != ok {
			t.Errorf("CheckRef(%q) = %v, want ok %v", ref, err, ok)
		}
	}
}

// testImage is two layers: a base, and one that deletes, hides and adds.
func testImage(t *testing.T) v1.Image {
	t.Helper()
	base := layerTar(t, dir("etc"), file("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"),
		dir("data"), file("data/old", "old"), file("data/keep", "keep"))
	top := layerTar(t, whiteout("data/.wh.old"), file("data/new", "new"))
	img, err := ocitest.Image(v1.Config{
		Env: []string{"PATH=/usr/bin:/bin", "FOO=bar"}, WorkingDir: "/data", User: "root",
		Entrypoint: []string{"/bin/sh"}, Cmd: []string{"-c", "echo hi"},
	}, base, top)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestOpenAndUnpack(t *testing.T) {
	testenv.RequireRoot(t)
	img := testImage(t)
	want, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	open := t.TempDir()
	host := ocitest.Registry(t, "", "")
	if err := ocitest.Push(host+"/test/img:v1", img, "", ""); err != nil {
		t.Fatal(err)
	}
	authed := ocitest.Registry(t, "alice", "s3cret")
	if err := ocitest.Push(authed+"/private/img:v1", img, "alice", "s3cret"); err != nil {
		t.Fatal(err)
	}
	docker, ociTar := filepath.Join(open, "docker.tar"), filepath.Join(open, "oci.tar")
	if err := ocitest.WriteDockerArchive(docker, "test/img:v1", img); err != nil {
		t.Fatal(err)
	}
	if err := ocitest.WriteOCIArchive(ociTar, img); err != nil {
		t.Fatal(err)
	}
	// The registries are on loopback, which a server-side pull reaches
	// only when the operator allows it.
	allowed := transport(t, host, authed)
	for _, c := range []struct {
		name, ref string
		auth      *Auth
	}{
		{"registry", host + "/test/img:v1", nil},
		{"registry with credentials", authed + "/private/img:v1", &Auth{"alice", "s3cret"}},
		{"docker save tarball", DockerArchive + docker, nil},
		{"OCI layout tarball", OCIArchive + ociTar, nil},
		{"either prefix for either format", OCIArchive + docker, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			tmp := t.TempDir()
			im, err := Open(t.Context(), c.ref, Options{Auth: c.auth, TempDir: tmp, Transport: allowed})
			if err != nil {
				t.Fatal(err)
			}
			if im.Digest != want {
				t.Errorf("digest %s, want the config digest %s", im.Digest, want)
			}
			cfg := im.Config
			if !slices.Equal(cfg.Env, []string{"PATH=/usr/bin:/bin", "FOO=bar"}) || cfg.WorkingDir != "/data" ||
				cfg.User != "root" || !slices.Equal(cfg.Entrypoint, []string{"/bin/sh"}) || !slices.Equal(cfg.Cmd, []string{"-c", "echo hi"}) {
				t.Errorf("config %+v", cfg)
			}
			dst := t.TempDir()
			if err := im.Unpack(t.Context(), dst); err != nil {
				t.Fatal(err)
			}
			wantTree(t, dst, "data/", "data/keep = keep", "data/new = new", "etc/", "etc/passwd = root:x:0:0:root:/root:/bin/sh\n")
			if err := im.Close(); err != nil {
				t.Fatal(err)
			}
			if left, _ := os.ReadDir(tmp); len(left) != 0 {
				t.Errorf("Close left %d entries in the temporary directory", len(left))
			}
		})
	}
	t.Run("registry without credentials", func(t *testing.T) {
		if _, err := Open(t.Context(), authed+"/private/img:v1", Options{Transport: allowed}); err == nil {
			t.Fatal("pulled from a registry that wants credentials without any")
		} else {
			t.Log(err)
		}
	})
}

// transport returns a server-side fetch transport that allows hosts.
func transport(t *testing.T, hosts ...string) http.RoundTripper {
	t.Helper()
	d, err := fetch.New(fetch.Config{Allow: hosts})
	if err != nil {
		t.Fatal(err)
	}
	return d.Transport()
}

// TestOpenRefusesLoopbackRegistry: through the server's fetch transport a
// registry on loopback is refused with the rule named, unless allowed;
// allowed, the same pull succeeds (the positive control).
func TestOpenRefusesLoopbackRegistry(t *testing.T) {
	host := ocitest.Registry(t, "", "")
	ref := host + "/test/img:v1"
	if err := ocitest.Push(ref, testImage(t), "", ""); err != nil {
		t.Fatal(err)
	}
	im, err := Open(t.Context(), ref, Options{Transport: transport(t, host)})
	if err != nil {
		t.Fatalf("allowed registry: %v", err)
	}
	im.Close()
	_, err = Open(t.Context(), ref, Options{Transport: transport(t)})
	var re *fetch.RefusedError
	if !errors.As(err, &re) {
		t.Fatalf("registry on loopback, not allowed: %v, want a refusal", err)
	}
	want := "registry " + host + " resolves to 127.0.0.1, in the loopback range 127.0.0.0/8: refused; allow it with --registry " + host
	if re.Error() != want || !strings.Contains(err.Error(), want) {
		t.Errorf("refusal %q\nwant %q", err, want)
	}
	t.Log(err)
}

func TestOpenRefusesOtherPlatforms(t *testing.T) {
	img, err := mutate.ConfigFile(testImage(t), &v1.ConfigFile{OS: "linux", Architecture: "arm64"})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "arm.tar")
	if err := ocitest.WriteDockerArchive(p, "test/arm:v1", img); err != nil {
		t.Fatal(err)
	}
	_, err = Open(t.Context(), DockerArchive+p, Options{})
	if err == nil || !strings.Contains(err.Error(), "linux/arm64") {
		t.Fatalf("Open of a linux/arm64 image: %v, want an error naming its platform", err)
	}
	t.Log(err)
}
