package identity

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

func TestResolvePath(t *testing.T) {
	u := &User{Name: "user", Home: "/home/user"}
	tests := []struct {
		name, path, workdir, want string
		wantErr                   error
	}{
		{name: "empty is the workdir", path: "", workdir: "/srv", want: "/srv"},
		{name: "empty without workdir is home", path: "", want: "/home/user"},
		{name: "tilde", path: "~", workdir: "/srv", want: "/home/user"},
		{name: "tilde slash", path: "~/a/../b", want: "/home/user/b"},
		{name: "other user's home is refused", path: "~root/x", wantErr: ErrInvalidPath},
		{name: "absolute is cleaned", path: "/tmp//x/./y", want: "/tmp/x/y"},
		{name: "relative is under home, not workdir", path: "a/b", workdir: "/srv", want: "/home/user/a/b"},
		{name: "relative cannot climb above root", path: "../../../etc/passwd", want: "/etc/passwd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ResolvePath(tt.path, u, tt.workdir)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("error = %v, want %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("ResolvePath(%q) = %q, want %q", tt.path, got, tt.want)
			}
		})
	}
}

func TestBasicAuthUser(t *testing.T) {
	tests := []struct {
		name, header, want string
		wantErr            bool
	}{
		{name: "absent", header: "", want: ""},
		{name: "root with empty password", header: "Basic cm9vdDo=", want: "root"},
		{name: "lower-case scheme", header: "basic dXNlcjo=", want: "user"},
		{name: "bearer is refused", header: "Bearer x", wantErr: true},
		{name: "bad base64", header: "Basic !!!", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.header != "" {
				h.Set("Authorization", tt.header)
			}
			got, err := BasicAuthUser(h)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("BasicAuthUser(%q) = %q, %v; want %q, error %v", tt.header, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestLookup(t *testing.T) {
	u, err := Lookup("root")
	if err != nil {
		t.Fatal(err)
	}
	if u.UID != 0 || u.GID != 0 || u.Home == "" || len(u.Groups) == 0 {
		t.Errorf("Lookup(root) = %+v", u)
	}
	if _, err := Lookup("no-such-user-xyz"); !errors.Is(err, ErrUnknownUser) {
		t.Errorf("Lookup(unknown) error = %v, want ErrUnknownUser", err)
	}
}

func TestMkdirAllOwnsAndIgnoresUmask(t *testing.T) {
	testenv.RequireRoot(t)
	nobody, err := Lookup("nobody")
	testenv.Require(t, err == nil, fmt.Sprintf("test needs a nobody account: %v", err))
	base := t.TempDir()
	dir := filepath.Join(base, "a", "b")
	if err := nobody.MkdirAll(dir); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Join(base, "a"), dir} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o755 {
			t.Errorf("%s mode %v, want 0755", d, fi.Mode().Perm())
		}
		if uid := statUID(t, fi); uid != nobody.UID {
			t.Errorf("%s owned by %d, want %d", d, uid, nobody.UID)
		}
	}
	if fi, _ := os.Stat(base); statUID(t, fi) == nobody.UID {
		t.Error("MkdirAll changed the owner of an existing directory")
	}
	file := filepath.Join(base, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := nobody.MkdirAll(filepath.Join(file, "x")); err == nil {
		t.Error("MkdirAll under a file succeeded")
	}
}
