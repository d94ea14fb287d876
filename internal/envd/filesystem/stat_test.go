package filesystem

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	pb "github.com/agent-sandbox/agent-sandbox/gen/filesystem"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

func TestStat(t *testing.T) {
	e := newTestEnv(t)
	e.tree(t, "file.txt", "dir/")
	mustDo(t, os.Chmod(e.path("file.txt"), 0o640))
	mustDo(t, os.Symlink("file.txt", e.path("link-file")))
	mustDo(t, os.Symlink(e.path("dir"), e.path("link-dir")))
	mustDo(t, os.Symlink("missing", e.path("dangling")))
	mustDo(t, os.Symlink("link-file", e.path("link-link")))

	grp, err := user.LookupGroupId(e.me.Gid)
	mustDo(t, err)
	owned := func(ent *pb.EntryInfo) *pb.EntryInfo {
		ent.Owner, ent.Group = e.me.Username, grp.Name
		return ent
	}
	dirFI, err := os.Lstat(e.path("dir"))
	mustDo(t, err)

	tests := []struct {
		name     string
		path     string
		user     string
		want     *pb.EntryInfo
		wantCode connect.Code
	}{
		{
			name: "file",
			path: e.path("file.txt"),
			want: owned(&pb.EntryInfo{
				Name: "file.txt", Type: pb.FileType_FILE_TYPE_FILE, Path: e.path("file.txt"),
				Size: 8, Mode: 0o640, Permissions: "-rw-r-----",
			}),
		},
		{
			name: "directory",
			path: e.path("dir"),
			want: owned(&pb.EntryInfo{
				Name: "dir", Type: pb.FileType_FILE_TYPE_DIRECTORY, Path: e.path("dir"),
				Size: dirFI.Size(), Mode: 0o755, Permissions: "drwxr-xr-x",
			}),
		},
		{
			name: "symlink to file reports target type and mode",
			path: e.path("link-file"),
			want: owned(&pb.EntryInfo{
				Name: "link-file", Type: pb.FileType_FILE_TYPE_FILE, Path: e.path("link-file"),
				Size: int64(len("file.txt")), Mode: 0o640, Permissions: "Lrwxrwxrwx",
				SymlinkTarget: proto.String(e.path("file.txt")),
			}),
		},
		{
			name: "symlink to directory",
			path: e.path("link-dir"),
			want: owned(&pb.EntryInfo{
				Name: "link-dir", Type: pb.FileType_FILE_TYPE_DIRECTORY, Path: e.path("link-dir"),
				Size: int64(len(e.path("dir"))), Mode: 0o755, Permissions: "Lrwxrwxrwx",
				SymlinkTarget: proto.String(e.path("dir")),
			}),
		},
		{
			name: "chain of links is fully resolved",
			path: e.path("link-link"),
			want: owned(&pb.EntryInfo{
				Name: "link-link", Type: pb.FileType_FILE_TYPE_FILE, Path: e.path("link-link"),
				Size: int64(len("link-file")), Mode: 0o640, Permissions: "Lrwxrwxrwx",
				SymlinkTarget: proto.String(e.path("file.txt")),
			}),
		},
		{
			name: "dangling symlink",
			path: e.path("dangling"),
			want: owned(&pb.EntryInfo{
				Name: "dangling", Type: pb.FileType_FILE_TYPE_SYMLINK, Path: e.path("dangling"),
				Size: int64(len("missing")), Mode: 0o777, Permissions: "Lrwxrwxrwx",
				SymlinkTarget: proto.String(e.path("missing")),
			}),
		},
		{name: "missing", path: e.path("nope"), wantCode: connect.CodeNotFound},
		{name: "below a file", path: e.path("file.txt/x"), wantCode: connect.CodeNotFound},
		{name: "other user's home", path: "~nobody/x", wantCode: connect.CodeInvalidArgument},
		{name: "unknown user", path: e.dir, user: "no-such-user-e2b", wantCode: connect.CodeUnauthenticated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := connect.NewRequest(&pb.StatRequest{Path: tt.path})
			if tt.user != "" {
				asUser(req, tt.user)
			}
			resp, err := e.client.Stat(ctxT(t), req)
			wantCode(t, err, tt.wantCode)
			if err != nil {
				return
			}
			got := resp.Msg.GetEntry()
			if got.GetModifiedTime() == nil {
				t.Error("modified_time missing")
			}
			if diff := cmp.Diff(tt.want, got, protocmp.Transform(), protocmp.IgnoreFields(&pb.EntryInfo{}, "modified_time")); diff != "" {
				t.Errorf("entry (-want +got):\n%s", diff)
			}
		})
	}
}

// requireUserXattrs skips t, or fails it under CI, when the filesystem
// holding dir cannot store user.* extended attributes (tmpfs before Linux
// 6.6, overlayfs on some hosts), since metadata lives in them.
func requireUserXattrs(t *testing.T, path string) {
	t.Helper()
	err := unix.Setxattr(path, "user.e2b-probe", []byte("1"), 0)
	testenv.Require(t, !errors.Is(err, unix.ENOTSUP) && !errors.Is(err, unix.EOPNOTSUPP),
		fmt.Sprintf("test needs user xattrs, which hold file metadata, on the filesystem of %s (t.TempDir; set TMPDIR)", path))
	mustDo(t, err)
	mustDo(t, unix.Removexattr(path, "user.e2b-probe"))
}

func TestStatMetadata(t *testing.T) {
	e := newTestEnv(t)
	e.tree(t, "file.txt")
	p := e.path("file.txt")
	requireUserXattrs(t, p)
	mustDo(t, unix.Setxattr(p, "user.e2b.owner", []byte("alice"), 0))
	mustDo(t, unix.Setxattr(p, "user.e2b.purpose", []byte("test data"), 0))
	mustDo(t, unix.Setxattr(p, "user.other", []byte("not ours"), 0))
	mustDo(t, os.Symlink("file.txt", e.path("link")))

	for _, path := range []string{p, e.path("link")} {
		resp, err := e.client.Stat(ctxT(t), connect.NewRequest(&pb.StatRequest{Path: path}))
		mustDo(t, err)
		want := map[string]string{"owner": "alice", "purpose": "test data"}
		if diff := cmp.Diff(want, resp.Msg.GetEntry().GetMetadata()); diff != "" {
			t.Errorf("Stat(%s) metadata (-want +got):\n%s", path, diff)
		}
	}
}
