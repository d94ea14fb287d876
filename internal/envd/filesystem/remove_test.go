package filesystem

import (
	"os"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/agent-sandbox/agent-sandbox/gen/filesystem"
)

func TestRemove(t *testing.T) {
	e := newTestEnv(t)
	e.tree(t, "file.txt", "dir/a/b.txt", "dir/c/")
	mustDo(t, os.Symlink(e.path("dir"), e.path("link")))

	tests := []struct {
		name string
		path string
		keep string // must survive the removal
	}{
		{name: "file", path: "file.txt"},
		{name: "symlink, not its target", path: "link", keep: "dir/a/b.txt"},
		{name: "directory tree", path: "dir"},
		{name: "missing path succeeds", path: "nope/deeper"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.client.Remove(ctxT(t), connect.NewRequest(&pb.RemoveRequest{Path: e.path(tt.path)}))
			mustDo(t, err)
			if _, err := os.Lstat(e.path(tt.path)); !os.IsNotExist(err) {
				t.Errorf("%s still there: %v", tt.path, err)
			}
			if tt.keep != "" {
				if _, err := os.Lstat(e.path(tt.keep)); err != nil {
					t.Errorf("%s removed too: %v", tt.keep, err)
				}
			}
			_, err = e.client.Stat(ctxT(t), connect.NewRequest(&pb.StatRequest{Path: e.path(tt.path)}))
			wantCode(t, err, connect.CodeNotFound)
		})
	}
}
