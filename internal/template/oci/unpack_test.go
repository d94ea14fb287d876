package oci

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
	"golang.org/x/sys/unix"
)

// ent is one entry of a crafted layer.
type ent struct {
	name     string
	typ      byte
	body     string // content, or link target
	mode     int64
	uid, gid int
	pax      map[string]string
}

func file(name, body string) ent { return ent{name: name, typ: tar.TypeReg, body: body, mode: 0o644} }
func dir(name string) ent        { return ent{name: name, typ: tar.TypeDir, mode: 0o755} }
func symlink(name, target string) ent {
	return ent{name: name, typ: tar.TypeSymlink, body: target, mode: 0o777}
}
func hardlink(name, target string) ent { return ent{name: name, typ: tar.TypeLink, body: target} }
func whiteout(name string) ent         { return file(name, "") }

func layerTar(t *testing.T, ents ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Uid: e.uid, Gid: e.gid,
			ModTime: time.Unix(1700000000, 0), PAXRecords: e.pax, Format: tar.FormatPAX}
		switch e.typ {
		case tar.TypeReg:
			h.Size = int64(len(e.body))
		case tar.TypeSymlink, tar.TypeLink:
			h.Linkname = e.body
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// unpackLayers applies layers into a new directory with lim and returns
// the directory and the error of the first layer that failed.
func unpackLayers(t *testing.T, lim Limits, layers ...[]byte) (string, error) {
	t.Helper()
	testenv.RequireRoot(t) // ownership
	dst := t.TempDir()
	root, err := os.OpenRoot(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	u := &unpacker{root: root, lim: lim.withDefaults()}
	for _, l := range layers {
		if err := u.apply(t.Context(), bytes.NewReader(l)); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// tree lists dir: each path (relative) with a short description.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			rel += " -> " + target
		case d.IsDir():
			rel += "/"
		default:
			data, _ := os.ReadFile(p)
			rel += " = " + string(data)
		}
		out = append(out, rel)
		return nil
	})
	return out
}

func wantTree(t *testing.T, dir string, want ...string) {
	t.Helper()
	if got := tree(t, dir); !slices.Equal(got, want) {
		t.Errorf("tree:\n got %q\nwant %q", got, want)
	}
}

func TestWhiteouts(t *testing.T) {
	base := layerTar(t, dir("a"), file("a/keep", "k"), file("a/gone", "g"), dir("a/sub"), file("a/sub/x", "x"),
		dir("o"), file("o/old", "old"), dir("o/d"), file("o/d/old", "old"), file("top", "t"))
	upper := layerTar(t,
		whiteout("a/.wh.gone"), whiteout("a/.wh.sub"), whiteout(".wh.top"),
		// An opaque directory keeps what this layer put in it, written
		// before or after the marker, and nothing from below.
		dir("o"), file("o/new1", "n1"), dir("o/d"), file("o/d/new", "n"), whiteout("o/.wh..wh..opq"), file("o/new2", "n2"),
		// Whiteouts for what does not exist are no-ops.
		whiteout("nope/.wh.missing"))
	dst, err := unpackLayers(t, Limits{}, base, upper)
	if err != nil {
		t.Fatal(err)
	}
	wantTree(t, dst, "a/", "a/keep = k", "o/", "o/d/", "o/d/new = n", "o/new1 = n1", "o/new2 = n2")
}

func TestReplaceKinds(t *testing.T) {
	base := layerTar(t, dir("d"), file("d/f", "f"), file("f", "file"), symlink("l", "f"), dir("keep"), file("keep/x", "x"))
	upper := layerTar(t,
		file("d", "now a file"), // a file replaces a directory
		dir("f"),                // a directory replaces a file
		file("l", "not a link"), // a file replaces a symlink, not what it points at
		dir("keep"),             // a directory over a directory merges
		file("keep/y", "y"))
	dst, err := unpackLayers(t, Limits{}, base, upper)
	if err != nil {
		t.Fatal(err)
	}
	wantTree(t, dst, "d = now a file", "f/", "keep/", "keep/x = x", "keep/y = y", "l = not a link")
}

func TestLinks(t *testing.T) {
	dst, err := unpackLayers(t, Limits{}, layerTar(t,
		dir("usr"), dir("usr/bin"), file("usr/bin/python3.11", "py"),
		hardlink("usr/bin/python3", "usr/bin/python3.11"),
		symlink("bin", "usr/bin"), symlink("usr/bin/abs", "/usr/bin/python3"),
		file("bin/via-link", "parent symlinks inside the root are followed")))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := os.Stat(filepath.Join(dst, "usr/bin/python3.11"))
	b, _ := os.Stat(filepath.Join(dst, "usr/bin/python3"))
	if !os.SameFile(a, b) {
		t.Error("hard link is not the same file as its target")
	}
	wantTree(t, dst, "bin -> usr/bin", "usr/", "usr/bin/", "usr/bin/abs -> /usr/bin/python3",
		"usr/bin/python3 = py", "usr/bin/python3.11 = py", "usr/bin/via-link = parent symlinks inside the root are followed")
}

func TestOwnersModesAndSkippedDevices(t *testing.T) {
	capability := string([]byte{1, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}) // cap_net_raw+ep, v2
	suid := file("suid", "s")
	suid.mode, suid.uid, suid.gid = 0o4755, 0, 0
	owned := file("owned", "o")
	owned.mode, owned.uid, owned.gid = 0o600, 1234, 5678
	sticky := dir("tmp")
	sticky.mode = 0o1777
	ping := file("ping", "p")
	ping.mode, ping.pax = 0o755, map[string]string{"SCHILY.xattr.security.capability": capability}
	dst, err := unpackLayers(t, Limits{}, layerTar(t, suid, owned, sticky, ping,
		ent{name: "null", typ: tar.TypeChar, mode: 0o666}, ent{name: "fifo", typ: tar.TypeFifo, mode: 0o644}))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		mode     fs.FileMode
		uid, gid uint32
	}{
		{"suid", fs.ModeSetuid | 0o755, 0, 0},
		{"owned", 0o600, 1234, 5678},
		{"tmp", fs.ModeDir | fs.ModeSticky | 0o777, 0, 0},
	} {
		fi, err := os.Lstat(filepath.Join(dst, c.name))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode() != c.mode || st.Uid != c.uid || st.Gid != c.gid {
			t.Errorf("%s: mode %v owner %d:%d, want %v %d:%d", c.name, fi.Mode(), st.Uid, st.Gid, c.mode, c.uid, c.gid)
		}
		if c.name == "owned" && !fi.ModTime().Equal(time.Unix(1700000000, 0)) {
			t.Errorf("%s: mtime %v, want the layer's", c.name, fi.ModTime())
		}
	}
	buf := make([]byte, 64)
	if n, err := unix.Lgetxattr(filepath.Join(dst, "ping"), "security.capability", buf); err != nil || string(buf[:n]) != capability {
		t.Errorf("file capability: %q, %v", buf[:max(n, 0)], err)
	}
	for _, n := range []string{"null", "fifo"} {
		if _, err := os.Lstat(filepath.Join(dst, n)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s was unpacked (%v); devices and FIFOs are skipped", n, err)
		}
	}
}

func TestPathEscapes(t *testing.T) {
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("intact"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		layers [][]byte
	}{
		{"dotdot", [][]byte{layerTar(t, file("../../../../"+victim, "pwned"))}},
		{"dotdot inside", [][]byte{layerTar(t, file("a/../../victim", "pwned"))}},
		{"absolute", [][]byte{layerTar(t, file(victim, "pwned"))}},
		{"hard link out", [][]byte{layerTar(t, hardlink("x", "../../../.."+victim))}},
		{"hard link absolute", [][]byte{layerTar(t, hardlink("x", victim))}},
		{"absolute symlink as parent", [][]byte{
			layerTar(t, symlink("out", outside)),
			layerTar(t, file("out/victim", "pwned")),
		}},
		{"relative symlink as parent", [][]byte{
			layerTar(t, dir("a"), symlink("a/out", "../../../../../../../.."+outside)),
			layerTar(t, file("a/out/victim", "pwned")),
		}},
		{"hard link through a symlink", [][]byte{
			layerTar(t, symlink("out", outside), hardlink("x", "out/victim")),
		}},
		{"whiteout through a symlink", [][]byte{
			layerTar(t, symlink("out", outside), whiteout("out/.wh.victim")),
		}},
		{"whiteout of the parent", [][]byte{layerTar(t, whiteout("a/.wh.."))}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := unpackLayers(t, Limits{}, c.layers...)
			if err == nil {
				t.Error("unpacked without error")
			}
			t.Log(err)
			if data, err := os.ReadFile(victim); err != nil || string(data) != "intact" {
				t.Fatalf("file outside the root changed: %q, %v", data, err)
			}
			if entries, _ := os.ReadDir(outside); len(entries) != 1 {
				t.Fatalf("directory outside the root has %d entries", len(entries))
			}
		})
	}
	// A symlink to outside is stored as it is, and a later file at its
	// name replaces the link instead of writing through it.
	dst, err := unpackLayers(t, Limits{}, layerTar(t, symlink("v", victim)), layerTar(t, file("v", "replaced")))
	if err != nil {
		t.Fatal(err)
	}
	wantTree(t, dst, "v = replaced")
	if data, _ := os.ReadFile(victim); string(data) != "intact" {
		t.Fatal("wrote through a symlink")
	}
}

func TestLimits(t *testing.T) {
	l := layerTar(t, file("a", "12345"), file("b", "67890"), dir("c"))
	if _, err := unpackLayers(t, Limits{MaxBytes: 10}, l); err != nil {
		t.Errorf("10 bytes within a 10-byte limit: %v", err)
	}
	if _, err := unpackLayers(t, Limits{MaxBytes: 9}, l); !errors.Is(err, ErrTooLarge) {
		t.Errorf("10 bytes over a 9-byte limit: %v, want ErrTooLarge", err)
	}
	if _, err := unpackLayers(t, Limits{MaxEntries: 5}, l, l); !errors.Is(err, ErrTooLarge) {
		t.Errorf("6 entries over a 5-entry limit: %v, want ErrTooLarge", err)
	}
	// The bytes count across layers.
	if _, err := unpackLayers(t, Limits{MaxBytes: 15}, l, l); !errors.Is(err, ErrTooLarge) {
		t.Errorf("20 bytes in two layers over a 15-byte limit: %v, want ErrTooLarge", err)
	}
}
