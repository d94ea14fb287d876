package filesystem

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/agent-sandbox/agent-sandbox/gen/filesystem"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

func TestMakeDir(t *testing.T) {
	e := newTestEnv(t)
	e.tree(t, "file.txt", "existing/")

	tests := []struct {
		name     string
		path     string
		wantCode connect.Code
	}{
		{name: "new", path: e.path("new")},
		{name: "with missing parents", path: e.path("a/b/c")},
		{name: "already a directory", path: e.path("existing"), wantCode: connect.CodeAlreadyExists},
		{name: "already a file", path: e.path("file.txt"), wantCode: connect.CodeInvalidArgument},
		{name: "below a file", path: e.path("file.txt/sub"), wantCode: connect.CodeInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := e.client.MakeDir(ctxT(t), connect.NewRequest(&pb.MakeDirRequest{Path: tt.path}))
			wantCode(t, err, tt.wantCode)
			if err != nil {
				return
			}
			ent := resp.Msg.GetEntry()
			if ent.GetType() != pb.FileType_FILE_TYPE_DIRECTORY || ent.GetPath() != tt.path || ent.GetName() != filepath.Base(tt.path) {
				t.Errorf("entry = %v, want directory %s", ent, tt.path)
			}
			if fi, err := os.Stat(tt.path); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
				t.Errorf("stat %s: %v, %v; want a 0755 directory", tt.path, fi, err)
			}
		})
	}
}

func TestMakeDirOwnership(t *testing.T) {
	testenv.RequireRoot(t)
	nobody, err := user.Lookup("nobody")
	testenv.Require(t, err == nil, fmt.Sprintf("test needs a user nobody to own the directories: %v", err))
	e := newTestEnv(t)
	e.openTo(t, 0o777)

	req := asUser(connect.NewRequest(&pb.MakeDirRequest{Path: e.path("x/y")}), "nobody")
	resp, err := e.client.MakeDir(ctxT(t), req)
	mustDo(t, err)
	if got := resp.Msg.GetEntry().GetOwner(); got != "nobody" {
		t.Errorf("entry owner = %q, want nobody", got)
	}
	for _, p := range []string{e.path("x"), e.path("x/y")} {
		fi, err := os.Stat(p)
		mustDo(t, err)
		st := fi.Sys().(*syscall.Stat_t)
		if strconv.Itoa(int(st.Uid)) != nobody.Uid || strconv.Itoa(int(st.Gid)) != nobody.Gid {
			t.Errorf("%s owned by %d:%d, want %s:%s", p, st.Uid, st.Gid, nobody.Uid, nobody.Gid)
		}
	}
	fi, err := os.Stat(e.dir)
	mustDo(t, err)
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 {
		t.Errorf("existing parent %s was chowned to %d", e.dir, st.Uid)
	}
}
