package filesystem

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/agent-sandbox/agent-sandbox/gen/filesystem"
	"github.com/agent-sandbox/agent-sandbox/gen/filesystem/filesystemconnect"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/state"
)

// testEnv is one Service behind a real HTTP server, and a client speaking
// the Connect protocol with the JSON codec, as the E2B SDKs do.
type testEnv struct {
	svc    *Service
	srv    *httptest.Server
	client filesystemconnect.FilesystemClient
	me     *user.User // the default user: whoever runs the test
	dir    string     // a fresh directory, symlinks resolved
}

func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	me, err := user.Current()
	if err != nil {
		t.Fatalf("current user: %v", err)
	}
	svc := NewService(state.New(state.Defaults{User: me.Username}), slog.New(slog.DiscardHandler))
	mux := http.NewServeMux()
	mux.Handle(filesystemconnect.NewFilesystemHandler(svc))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		if err := svc.Close(); err != nil {
			t.Errorf("closing service: %v", err)
		}
	})
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &testEnv{
		svc:    svc,
		srv:    srv,
		client: filesystemconnect.NewFilesystemClient(srv.Client(), srv.URL, connect.WithProtoJSON()),
		me:     me,
		dir:    dir,
	}
}

// openTo lets other users reach the test directory (t.TempDir's parent is
// its owner's alone) and gives the directory itself mode.
func (e *testEnv) openTo(t *testing.T, mode os.FileMode) {
	t.Helper()
	mustDo(t, os.Chmod(filepath.Dir(e.dir), 0o755))
	mustDo(t, os.Chmod(e.dir, mode))
}

// path returns rel under the test directory.
func (e *testEnv) path(rel string) string { return filepath.Join(e.dir, rel) }

// tree creates files (content = their name) and directories (names ending
// in "/") under the test directory.
func (e *testEnv) tree(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		p := e.path(n)
		if strings.HasSuffix(n, "/") {
			mustDo(t, os.MkdirAll(p, 0o755))
			continue
		}
		mustDo(t, os.MkdirAll(filepath.Dir(p), 0o755))
		mustDo(t, os.WriteFile(p, []byte(n), 0o644))
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// asUser returns req sent as user name, the way the SDKs name a user.
func asUser[T any](req *connect.Request[T], name string) *connect.Request[T] {
	req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(name+":")))
	return req
}

// wantCode fails t unless err is a Connect error with code want (or nil
// when want is 0).
func wantCode(t *testing.T, err error, want connect.Code) {
	t.Helper()
	if want == 0 {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("got no error, want %v", want)
	}
	if got := connect.CodeOf(err); got != want {
		t.Fatalf("got code %v (%v), want %v", got, err, want)
	}
}

func TestUnknownUserIsUnauthenticated(t *testing.T) {
	e := newTestEnv(t)
	const name = "no-such-user-e2b"
	calls := map[string]func(context.Context) error{
		"Stat": func(ctx context.Context) error {
			_, err := e.client.Stat(ctx, asUser(connect.NewRequest(&pb.StatRequest{Path: e.dir}), name))
			return err
		},
		"MakeDir": func(ctx context.Context) error {
			_, err := e.client.MakeDir(ctx, asUser(connect.NewRequest(&pb.MakeDirRequest{Path: e.path("x")}), name))
			return err
		},
		"Move": func(ctx context.Context) error {
			_, err := e.client.Move(ctx, asUser(connect.NewRequest(&pb.MoveRequest{Source: e.path("a"), Destination: e.path("b")}), name))
			return err
		},
		"ListDir": func(ctx context.Context) error {
			_, err := e.client.ListDir(ctx, asUser(connect.NewRequest(&pb.ListDirRequest{Path: e.dir}), name))
			return err
		},
		"Remove": func(ctx context.Context) error {
			_, err := e.client.Remove(ctx, asUser(connect.NewRequest(&pb.RemoveRequest{Path: e.path("x")}), name))
			return err
		},
		"CreateWatcher": func(ctx context.Context) error {
			_, err := e.client.CreateWatcher(ctx, asUser(connect.NewRequest(&pb.CreateWatcherRequest{Path: e.dir}), name))
			return err
		},
		"WatchDir": func(ctx context.Context) error {
			stream, err := e.client.WatchDir(ctx, asUser(connect.NewRequest(&pb.WatchDirRequest{Path: e.dir}), name))
			if err != nil {
				return err
			}
			defer stream.Close()
			for stream.Receive() {
				return errors.New("got a message, want an error")
			}
			return stream.Err()
		},
	}
	for rpc, call := range calls {
		t.Run(rpc, func(t *testing.T) {
			err := call(ctxT(t))
			wantCode(t, err, connect.CodeUnauthenticated)
			if want := "invalid username: '" + name + "'"; !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not contain %q", err, want)
			}
		})
	}
}

// TestWireJSON checks the bytes the SDKs parse: symlinkTarget absent for a
// plain file, and the WatchDir oneof without a wrapper object.
func TestWireJSON(t *testing.T) {
	e := newTestEnv(t)
	e.tree(t, "file.txt")
	mustDo(t, os.Symlink("file.txt", e.path("link")))

	post := func(method, contentType, body string) string {
		t.Helper()
		req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, e.srv.URL+"/filesystem.Filesystem/"+method, strings.NewReader(body))
		mustDo(t, err)
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Connect-Protocol-Version", "1")
		req.Header.Set("Connect-Timeout-Ms", "500")
		resp, err := http.DefaultClient.Do(req)
		mustDo(t, err)
		defer resp.Body.Close()
		// A watch stream runs until the 500 ms deadline, then ends.
		b, err := io.ReadAll(resp.Body)
		mustDo(t, err)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d: %s", method, resp.StatusCode, b)
		}
		return string(b)
	}

	file := post("Stat", "application/json", `{"path":"`+e.path("file.txt")+`"}`)
	if strings.Contains(file, "symlinkTarget") {
		t.Errorf("Stat of a file: symlinkTarget present: %s", file)
	}
	if !strings.Contains(file, `"type":"FILE_TYPE_FILE"`) || !strings.Contains(file, `"modifiedTime":"`) {
		t.Errorf("Stat of a file: unexpected JSON: %s", file)
	}
	link := post("Stat", "application/json", `{"path":"`+e.path("link")+`"}`)
	if want := `"symlinkTarget":"` + e.path("file.txt") + `"`; !strings.Contains(link, want) {
		t.Errorf("Stat of a link: %s does not contain %s", link, want)
	}

	body := `{"path":"` + e.dir + `"}`
	frame := string([]byte{0, 0, 0, 0, byte(len(body))}) + body
	watch := post("WatchDir", "application/connect+json", frame)
	if want := "\x00\x00\x00\x00\x0c{\"start\":{}}"; !strings.HasPrefix(watch, want) {
		t.Errorf("WatchDir first frame = %q, want prefix %q", watch, want)
	}
}
