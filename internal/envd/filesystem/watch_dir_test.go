package filesystem

import (
	"context"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/agent-sandbox/agent-sandbox/gen/filesystem"
)

// watchStream is an open WatchDir call whose messages arrive on msgs; msgs
// is closed when the stream ends, and err is then its error.
type watchStream struct {
	msgs   chan *pb.WatchDirResponse
	err    error
	cancel context.CancelFunc
}

func (e *testEnv) watchDir(t *testing.T, req *connect.Request[pb.WatchDirRequest], timeout time.Duration) *watchStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	stream, err := e.client.WatchDir(ctx, req)
	if err != nil {
		cancel()
		t.Fatalf("WatchDir: %v", err)
	}
	ws := &watchStream{msgs: make(chan *pb.WatchDirResponse, 100), cancel: cancel}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ws.msgs)
		for stream.Receive() {
			ws.msgs <- stream.Msg()
		}
		ws.err = stream.Err()
	}()
	t.Cleanup(func() {
		cancel()
		stream.Close()
		<-done
	})
	return ws
}

// next returns the next message, or nil once the stream has ended.
func (ws *watchStream) next(t *testing.T) *pb.WatchDirResponse {
	t.Helper()
	select {
	case m := <-ws.msgs:
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("no message from WatchDir within 5s")
		return nil
	}
}

// waitFor skips messages until a filesystem event for name of type typ.
func (ws *watchStream) waitFor(t *testing.T, name string, typ pb.EventType) *pb.FilesystemEvent {
	t.Helper()
	for {
		m := ws.next(t)
		if m == nil {
			t.Fatalf("stream ended (%v) before %s %s", ws.err, typ, name)
		}
		if ev := m.GetFilesystem(); ev.GetName() == name && ev.GetType() == typ {
			return ev
		}
	}
}

func (ws *watchStream) wantStart(t *testing.T) {
	t.Helper()
	if m := ws.next(t); m.GetStart() == nil {
		t.Fatalf("first message = %v (stream error %v), want start", m, ws.err)
	}
}

func TestWatchDir(t *testing.T) {
	e := newTestEnv(t)

	t.Run("events with entries", func(t *testing.T) {
		e.tree(t, "flat/")
		ws := e.watchDir(t, connect.NewRequest(&pb.WatchDirRequest{Path: e.path("flat"), IncludeEntry: true}), 10*time.Second)
		ws.wantStart(t)

		mustDo(t, os.WriteFile(e.path("flat/a.txt"), []byte("x"), 0o644))
		ev := ws.waitFor(t, "a.txt", pb.EventType_EVENT_TYPE_CREATE)
		if ev.GetEntry().GetPath() != e.path("flat/a.txt") || ev.GetEntry().GetType() != pb.FileType_FILE_TYPE_FILE {
			t.Errorf("CREATE entry = %v, want the file", ev.GetEntry())
		}
		ev = ws.waitFor(t, "a.txt", pb.EventType_EVENT_TYPE_WRITE)
		if ev.GetEntry() == nil {
			t.Error("WRITE without entry")
		}
		mustDo(t, os.Chmod(e.path("flat/a.txt"), 0o600))
		if ev := ws.waitFor(t, "a.txt", pb.EventType_EVENT_TYPE_CHMOD); ev.GetEntry().GetMode() != 0o600 {
			t.Errorf("CHMOD entry = %v, want mode 0600", ev.GetEntry())
		}
		mustDo(t, os.Rename(e.path("flat/a.txt"), e.path("flat/b.txt")))
		ws.waitFor(t, "a.txt", pb.EventType_EVENT_TYPE_RENAME)
		ws.waitFor(t, "b.txt", pb.EventType_EVENT_TYPE_CREATE)
		mustDo(t, os.Remove(e.path("flat/b.txt")))
		if ev := ws.waitFor(t, "b.txt", pb.EventType_EVENT_TYPE_REMOVE); ev.Entry != nil {
			t.Errorf("REMOVE carries an entry: %v", ev.GetEntry())
		}
	})

	t.Run("without include_entry", func(t *testing.T) {
		e.tree(t, "plain/")
		ws := e.watchDir(t, connect.NewRequest(&pb.WatchDirRequest{Path: e.path("plain")}), 10*time.Second)
		ws.wantStart(t)
		mustDo(t, os.WriteFile(e.path("plain/a.txt"), nil, 0o644))
		if ev := ws.waitFor(t, "a.txt", pb.EventType_EVENT_TYPE_CREATE); ev.Entry != nil {
			t.Errorf("entry attached without include_entry: %v", ev.GetEntry())
		}
	})

	t.Run("recursive", func(t *testing.T) {
		e.tree(t, "rec/existing/deeper/", "staging/inner/")
		ws := e.watchDir(t, connect.NewRequest(&pb.WatchDirRequest{Path: e.path("rec"), Recursive: true}), 10*time.Second)
		ws.wantStart(t)

		// A subdirectory that existed when the watch started.
		mustDo(t, os.WriteFile(e.path("rec/existing/deeper/f.txt"), nil, 0o644))
		ws.waitFor(t, "existing/deeper/f.txt", pb.EventType_EVENT_TYPE_CREATE)

		// A subdirectory created later.
		mustDo(t, os.Mkdir(e.path("rec/nested"), 0o755))
		ws.waitFor(t, "nested", pb.EventType_EVENT_TYPE_CREATE)
		mustDo(t, os.WriteFile(e.path("rec/nested/file.txt"), nil, 0o644))
		ws.waitFor(t, "nested/file.txt", pb.EventType_EVENT_TYPE_CREATE)

		// A directory moved in, with a subdirectory of its own.
		mustDo(t, os.Rename(e.path("staging"), e.path("rec/moved")))
		ws.waitFor(t, "moved", pb.EventType_EVENT_TYPE_CREATE)
		mustDo(t, os.WriteFile(e.path("rec/moved/inner/g.txt"), nil, 0o644))
		ws.waitFor(t, "moved/inner/g.txt", pb.EventType_EVENT_TYPE_CREATE)

		// A watched subdirectory renamed: one RENAME, and the new name is
		// watched under its new path.
		mustDo(t, os.Rename(e.path("rec/nested"), e.path("rec/renamed")))
		ws.waitFor(t, "nested", pb.EventType_EVENT_TYPE_RENAME)
		ws.waitFor(t, "renamed", pb.EventType_EVENT_TYPE_CREATE)
		mustDo(t, os.WriteFile(e.path("rec/renamed/h.txt"), nil, 0o644))
		for {
			ev := ws.next(t).GetFilesystem()
			if ev.GetName() == "nested" && ev.GetType() == pb.EventType_EVENT_TYPE_RENAME {
				t.Error("second RENAME for the renamed directory")
			}
			if ev.GetName() == "renamed/h.txt" && ev.GetType() == pb.EventType_EVENT_TYPE_CREATE {
				break
			}
		}
	})

	t.Run("recursive through a symlinked root", func(t *testing.T) {
		e.tree(t, "real/sub/")
		mustDo(t, os.Symlink(e.path("real"), e.path("alias")))
		ws := e.watchDir(t, connect.NewRequest(&pb.WatchDirRequest{Path: e.path("alias"), Recursive: true, IncludeEntry: true}), 10*time.Second)
		ws.wantStart(t)
		mustDo(t, os.WriteFile(e.path("real/sub/f.txt"), nil, 0o644))
		if ev := ws.waitFor(t, "sub/f.txt", pb.EventType_EVENT_TYPE_CREATE); ev.GetEntry().GetPath() != e.path("alias/sub/f.txt") {
			t.Errorf("entry path = %q, want it under the requested path", ev.GetEntry().GetPath())
		}
	})

	t.Run("keepalive when idle", func(t *testing.T) {
		req := connect.NewRequest(&pb.WatchDirRequest{Path: e.dir})
		req.Header().Set("Keepalive-Ping-Interval", "1")
		ws := e.watchDir(t, req, 10*time.Second)
		ws.wantStart(t)
		start := time.Now()
		if m := ws.next(t); m.GetKeepalive() == nil {
			t.Fatalf("got %v, want keepalive", m)
		}
		if d := time.Since(start); d < 900*time.Millisecond {
			t.Errorf("keepalive after %v, want about 1s", d)
		}
	})

	t.Run("ends at the deadline", func(t *testing.T) {
		ws := e.watchDir(t, connect.NewRequest(&pb.WatchDirRequest{Path: e.dir}), 300*time.Millisecond)
		ws.wantStart(t)
		for m := ws.next(t); m != nil; m = ws.next(t) {
		}
		wantCode(t, ws.err, connect.CodeDeadlineExceeded)
	})

	e.tree(t, "file.txt")
	for _, tt := range []struct {
		name     string
		path     string
		wantCode connect.Code
	}{
		{name: "missing", path: e.path("nope"), wantCode: connect.CodeNotFound},
		{name: "not a directory", path: e.path("file.txt"), wantCode: connect.CodeInvalidArgument},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ws := e.watchDir(t, connect.NewRequest(&pb.WatchDirRequest{Path: tt.path}), 5*time.Second)
			if m := ws.next(t); m != nil {
				t.Fatalf("got %v, want an error", m)
			}
			wantCode(t, ws.err, tt.wantCode)
		})
	}
}
