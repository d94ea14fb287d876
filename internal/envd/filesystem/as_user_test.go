package filesystem

import (
	"os"
	"os/user"
	"strconv"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/agent-sandbox/agent-sandbox/gen/filesystem"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

// TestAsUser: every call acts with the requesting user's permissions:
// nobody is refused what root's files deny it, and root, the positive
// control, is not.
func TestAsUser(t *testing.T) {
	testenv.RequireRoot(t)
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Fatalf("looking up nobody: %v", err)
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	e := newTestEnv(t)
	e.openTo(t, 0o755) // root's, like /etc
	e.tree(t, "secret/f", "public", "home/")
	mustDo(t, os.Chmod(e.path("secret"), 0o700))
	mustDo(t, os.Chown(e.path("home"), uid, gid))

	calls := []struct {
		name string
		call func(as string) error
	}{
		{"stat in a 0700 directory", func(as string) error {
			_, err := e.client.Stat(ctxT(t), asUser(connect.NewRequest(&pb.StatRequest{Path: e.path("secret/f")}), as))
			return err
		}},
		{"list a 0700 directory", func(as string) error {
			_, err := e.client.ListDir(ctxT(t), asUser(connect.NewRequest(&pb.ListDirRequest{Path: e.path("secret")}), as))
			return err
		}},
		{"watch a 0700 directory", func(as string) error {
			resp, err := e.client.CreateWatcher(ctxT(t), asUser(connect.NewRequest(&pb.CreateWatcherRequest{Path: e.path("secret")}), as))
			if err == nil {
				_, err = e.client.RemoveWatcher(ctxT(t), connect.NewRequest(&pb.RemoveWatcherRequest{WatcherId: resp.Msg.GetWatcherId()}))
			}
			return err
		}},
		{"make a directory in root's", func(as string) error {
			_, err := e.client.MakeDir(ctxT(t), asUser(connect.NewRequest(&pb.MakeDirRequest{Path: e.path("new-by-" + as)}), as))
			return err
		}},
		{"move root's file into the user's home", func(as string) error {
			_, err := e.client.Move(ctxT(t), asUser(connect.NewRequest(&pb.MoveRequest{Source: e.path("public"), Destination: e.path("home/public")}), as))
			return err
		}},
		{"remove a file from root's directory", func(as string) error {
			_, err := e.client.Remove(ctxT(t), asUser(connect.NewRequest(&pb.RemoveRequest{Path: e.path("secret")}), as))
			return err
		}},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			if err := c.call("nobody"); connect.CodeOf(err) != connect.CodePermissionDenied {
				t.Errorf("as nobody: %v, want permission_denied", err)
			}
			if err := c.call("root"); err != nil {
				t.Errorf("control, as root: %v", err)
			}
		})
	}
}
