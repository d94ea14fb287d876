package template

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/fetch"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail/jailtest"
	"github.com/agent-sandbox/agent-sandbox/internal/template/oci"
	"github.com/agent-sandbox/agent-sandbox/internal/template/oci/ocitest"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

// tinyImage is jailtest's root filesystem as an image of two layers: the
// tree, then a layer that deletes /etc/hosts and adds /etc/motd.
func tinyImage(t *testing.T) v1.Image {
	t.Helper()
	src := filepath.Join(safeTempDir(t), "rootfs")
	if err := jailtest.BuildRootfs(src); err != nil {
		t.Fatal(err)
	}
	base, err := ocitest.TarDir(src)
	if err != nil {
		t.Fatal(err)
	}
	var top bytes.Buffer
	tw := tar.NewWriter(&top)
	for _, h := range []*tar.Header{
		{Name: "etc/.wh.hosts", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "etc/motd", Typeflag: tar.TypeReg, Mode: 0o644, Size: 15},
	} {
		tw.WriteHeader(h)
	}
	tw.Write([]byte("from the image\n"))
	tw.Close()
	img, err := ocitest.Image(v1.Config{
		Env: []string{"PATH=/usr/bin:/bin", "IMAGE_VAR=1"}, User: "user", Cmd: []string{"/bin/bash"},
	}, base, top.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func countMsg(r *recorder, msg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.recs {
		if rec.msg == msg {
			n++
		}
	}
	return n
}

func TestTemplateFromImage(t *testing.T) {
	testenv.RequireRoot(t)
	data := safeTempDir(t)
	img := tinyImage(t)
	host := ocitest.Registry(t, "builder", "pw")
	if err := ocitest.Push(host+"/test/tiny:v1", img, "builder", "pw"); err != nil {
		t.Fatal(err)
	}
	run := Instruction{Op: OpRun, Args: []string{`test ! -e /etc/hosts && cat /etc/motd > /ran && echo "$IMAGE_VAR $(id -un)" >> /ran`}}
	spec := Spec{
		Name: "from-image", FromImage: host + "/test/tiny:v1", RegistryAuth: &oci.Auth{Username: "builder", Password: "pw"},
		Instructions: []Instruction{run},
	}
	tmpl, rec, took, err := buildLogged(t, data, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pull, unpack and build: %s", took)
	if n := countMsg(rec, "unpacking image"); n != 1 {
		t.Errorf("image unpacked %d times, want 1", n)
	}
	root := tmpl.RootFS
	checkFile(t, root, "ran", 0o644, 0, "from the image\n1 root\n")
	checkFile(t, root, "etc/motd", 0o644, 0, "from the image\n")
	if _, err := os.Lstat(filepath.Join(root, "etc/hosts")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("/etc/hosts, deleted by the image's top layer, is in the template: %v", err)
	}
	// The image's defaults: its USER, that user's home (no WORKDIR), its ENV.
	if tmpl.User != "user" || tmpl.Workdir != "/home/user" || tmpl.Env["IMAGE_VAR"] != "1" || tmpl.Env["PATH"] != "/usr/bin:/bin" {
		t.Errorf("template defaults: user %q workdir %q env %v", tmpl.User, tmpl.Workdir, tmpl.Env)
	}
	// The template shares the image's files.
	digest, _ := img.ConfigName()
	a, err1 := os.Stat(filepath.Join(data, "templates/.images", digest.Hex, "rootfs/usr/bin/bash"))
	b, err2 := os.Stat(filepath.Join(root, "usr/bin/bash"))
	if err1 != nil || err2 != nil || !os.SameFile(a, b) {
		t.Errorf("template's /usr/bin/bash is not the image's, hard-linked (%v, %v)", err1, err2)
	}
	assertNoMounts(t, data)

	// The same image from a `docker save` tarball has the same digest: it
	// is not unpacked again, and the same RUN on it is cached.
	archive := filepath.Join(t.TempDir(), "tiny.tar")
	if err := ocitest.WriteDockerArchive(archive, "test/tiny:v1", img); err != nil {
		t.Fatal(err)
	}
	spec2 := Spec{Name: "from-tarball", FromImage: oci.DockerArchive + archive, Instructions: []Instruction{run}}
	tmpl2, rec, took, err := buildLogged(t, data, spec2)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("same image from a tarball: %s", took)
	if n := countMsg(rec, "unpacking image"); n != 0 {
		t.Errorf("image unpacked %d times again, want 0", n)
	}
	if cached, ran := rec.steps(); !slices.Equal(cached, []int{1}) || len(ran) != 0 {
		t.Errorf("cached %v, ran %v; want the RUN cached", cached, ran)
	}
	checkFile(t, tmpl2.RootFS, "ran", 0o644, 0, "from the image\n1 root\n")

	// The credentials stay out of what is written to disk.
	meta, err := os.ReadFile(filepath.Join(filepath.Dir(tmpl.RootFS), metaFile))
	if err != nil || bytes.Contains(meta, []byte(`"pw"`)) || !bytes.Contains(meta, []byte(`"fromImage"`)) {
		t.Errorf("template.json (%v) holds the registry password or lacks the image:\n%s", err, meta)
	}

	// Through the server's fetch transport the registry, on loopback, is
	// refused with the rule named, unless the operator allowed it.
	for _, allow := range [][]string{nil, {host}} {
		d, err := fetch.New(fetch.Config{Allow: allow})
		if err != nil {
			t.Fatal(err)
		}
		b := testBuilder(t, data)
		b.RegistryTransport = d.Transport()
		_, err = b.Ensure(t.Context(), spec)
		var re *fetch.RefusedError
		if allowed := allow != nil; allowed && err != nil {
			t.Errorf("pull from the allowed registry %s: %v", host, err)
		} else if !allowed && !errors.As(err, &re) {
			t.Errorf("pull from %s, not allowed: %v, want a refusal", host, err)
		}
	}

	// Without the registry's credentials, the pull fails and says so.
	spec.RegistryAuth = nil
	if _, err := testBuilder(t, data).Ensure(t.Context(), spec); err == nil {
		t.Error("pulled without credentials from a registry that wants them")
	} else {
		t.Log(err)
	}
}

// TestImageDefaultUser checks the default user of templates from images
// whose USER has no passwd entry (root instead) or that have no passwd at
// all (a clear error).
func TestImageDefaultUser(t *testing.T) {
	testenv.RequireRoot(t)
	data := safeTempDir(t)
	layer := func(files map[string]string) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for name, content := range files {
			tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(content))})
			tw.Write([]byte(content))
		}
		tw.Close()
		return buf.Bytes()
	}
	for _, c := range []struct {
		name    string
		files   map[string]string
		user    string
		want    string // the template's user, or
		wantErr string // the build's error
	}{
		{"unknown user", map[string]string{"etc/passwd": "root:x:0:0:root:/root:/bin/sh\n"}, "nobody", "root", ""},
		{"user by uid", map[string]string{"etc/passwd": "root:x:0:0:root:/root:/bin/sh\napp:x:100:100::/srv/app:/bin/sh\n"}, "100:100", "app", ""},
		{"no passwd", map[string]string{"etc/motd": "hi\n"}, "", "", `user "root" not found in /etc/passwd`},
	} {
		t.Run(c.name, func(t *testing.T) {
			img, err := ocitest.Image(v1.Config{User: c.user}, layer(c.files))
			if err != nil {
				t.Fatal(err)
			}
			archive := filepath.Join(t.TempDir(), "img.tar")
			if err := ocitest.WriteDockerArchive(archive, "test/img:v1", img); err != nil {
				t.Fatal(err)
			}
			tmpl, err := testBuilder(t, data).Ensure(t.Context(), Spec{Name: "img", FromImage: oci.OCIArchive + archive})
			switch {
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("build: %v, want an error with %q", err, c.wantErr)
			case c.wantErr == "" && err != nil:
				t.Fatal(err)
			case c.wantErr == "" && tmpl.User != c.want:
				t.Errorf("default user %q, want %q", tmpl.User, c.want)
			}
		})
	}
	assertNoMounts(t, data)
}
