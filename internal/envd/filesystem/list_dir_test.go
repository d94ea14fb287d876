package filesystem

import (
	"os"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"

	pb "github.com/agent-sandbox/agent-sandbox/gen/filesystem"
)

func TestListDir(t *testing.T) {
	e := newTestEnv(t)
	e.tree(t,
		"tree/file1.txt",
		"tree/subdir1/subdir1_1/deep.txt",
		"tree/subdir1/subdir1_2/",
		"tree/subdir2/",
		"links/file.txt",
		"links/dir/inside.txt",
	)
	mustDo(t, os.Symlink(e.path("tree"), e.path("tree-link")))
	mustDo(t, os.Symlink("file.txt", e.path("links/to-file")))
	mustDo(t, os.Symlink("dir", e.path("links/to-dir")))
	mustDo(t, os.Symlink("missing", e.path("links/dangling")))

	level1 := []string{"file1.txt", "subdir1", "subdir2"}
	level2 := []string{"file1.txt", "subdir1", "subdir1/subdir1_1", "subdir1/subdir1_2", "subdir2"}
	level3 := []string{"file1.txt", "subdir1", "subdir1/subdir1_1", "subdir1/subdir1_1/deep.txt", "subdir1/subdir1_2", "subdir2"}

	tests := []struct {
		name     string
		path     string
		depth    uint32
		want     []string // relative to path, in order
		wantCode connect.Code
	}{
		{name: "depth 0 means 1", path: "tree", depth: 0, want: level1},
		{name: "depth 1", path: "tree", depth: 1, want: level1},
		{name: "depth 2", path: "tree", depth: 2, want: level2},
		{name: "depth 3", path: "tree", depth: 3, want: level3},
		{name: "depth beyond the tree", path: "tree", depth: 10, want: level3},
		{name: "symlinked root is followed", path: "tree-link", depth: 2, want: level2},
		{name: "symlinks inside are not descended", path: "links", depth: 3,
			want: []string{"dangling", "dir", "dir/inside.txt", "file.txt", "to-dir", "to-file"}},
		{name: "empty directory", path: "tree/subdir2", depth: 1, want: nil},
		{name: "missing", path: "nope", wantCode: connect.CodeNotFound},
		{name: "not a directory", path: "tree/file1.txt", wantCode: connect.CodeInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := e.path(tt.path)
			resp, err := e.client.ListDir(ctxT(t), connect.NewRequest(&pb.ListDirRequest{Path: root, Depth: tt.depth}))
			wantCode(t, err, tt.wantCode)
			if err != nil {
				return
			}
			var got []string
			for _, ent := range resp.Msg.GetEntries() {
				rel, err := filepath.Rel(root, ent.GetPath())
				mustDo(t, err)
				got = append(got, rel)
				if ent.GetName() != filepath.Base(rel) {
					t.Errorf("entry %s has name %q", ent.GetPath(), ent.GetName())
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("entries (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("entry types", func(t *testing.T) {
		resp, err := e.client.ListDir(ctxT(t), connect.NewRequest(&pb.ListDirRequest{Path: e.path("links")}))
		mustDo(t, err)
		want := map[string]pb.FileType{
			"dangling": pb.FileType_FILE_TYPE_SYMLINK,
			"dir":      pb.FileType_FILE_TYPE_DIRECTORY,
			"file.txt": pb.FileType_FILE_TYPE_FILE,
			"to-dir":   pb.FileType_FILE_TYPE_DIRECTORY,
			"to-file":  pb.FileType_FILE_TYPE_FILE,
		}
		got := map[string]pb.FileType{}
		for _, ent := range resp.Msg.GetEntries() {
			got[ent.GetName()] = ent.GetType()
			isLink := ent.GetPermissions()[0] == 'L'
			if isLink != (ent.SymlinkTarget != nil) {
				t.Errorf("%s: permissions %s, symlink_target %v", ent.GetName(), ent.GetPermissions(), ent.SymlinkTarget)
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("types (-want +got):\n%s", diff)
		}
	})
}
