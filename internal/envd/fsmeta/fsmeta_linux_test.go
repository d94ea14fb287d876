package fsmeta

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

func TestReplaceAndRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := unix.Setxattr(path, "user.other", []byte("keep"), 0)
	testenv.Require(t, !errors.Is(err, unix.ENOTSUP), "test needs user xattrs on "+filepath.Dir(path)+" (t.TempDir; set TMPDIR)")
	if err != nil {
		t.Fatal(err)
	}
	steps := []map[string]string{
		{"a": "1", "b": "2"},
		{"b": "3"}, // replaces: a is gone
		nil,        // clears
	}
	for _, md := range steps {
		if err := Replace(path, md); err != nil {
			t.Fatalf("Replace(%v): %v", md, err)
		}
		got, err := Read(path)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(md, got); diff != "" {
			t.Errorf("after Replace(%v), Read (-want +got):\n%s", md, diff)
		}
	}
	buf := make([]byte, 16)
	if n, err := unix.Getxattr(path, "user.other", buf); err != nil || string(buf[:n]) != "keep" {
		t.Errorf("an xattr outside %s was touched: %q, %v", Prefix, buf[:n], err)
	}
}
