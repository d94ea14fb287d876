package filesystem

import (
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/agent-sandbox/agent-sandbox/gen/filesystem"
)

func TestPollingWatcher(t *testing.T) {
	e := newTestEnv(t)
	e.tree(t, "w/sub/", "file.txt")

	resp, err := e.client.CreateWatcher(ctxT(t), connect.NewRequest(&pb.CreateWatcherRequest{
		Path: e.path("w"), Recursive: true, IncludeEntry: true,
	}))
	mustDo(t, err)
	id := resp.Msg.GetWatcherId()
	if id == "" {
		t.Fatal("empty watcher id")
	}

	// poll polls until a CREATE for name arrives and returns everything seen.
	poll := func(name string) []*pb.FilesystemEvent {
		t.Helper()
		var seen []*pb.FilesystemEvent
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			resp, err := e.client.GetWatcherEvents(ctxT(t), connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: id}))
			mustDo(t, err)
			seen = append(seen, resp.Msg.GetEvents()...)
			for _, ev := range resp.Msg.GetEvents() {
				if ev.GetName() == name && ev.GetType() == pb.EventType_EVENT_TYPE_CREATE {
					return seen
				}
			}
		}
		t.Fatalf("no CREATE %s within 5s; saw %v", name, seen)
		return nil
	}

	mustDo(t, os.WriteFile(e.path("w/one.txt"), nil, 0o644))
	first := poll("one.txt")
	if ev := first[len(first)-1]; ev.GetEntry().GetPath() != e.path("w/one.txt") {
		t.Errorf("CREATE entry = %v", ev.GetEntry())
	}
	mustDo(t, os.WriteFile(e.path("w/sub/two.txt"), nil, 0o644))
	for _, ev := range poll("sub/two.txt") {
		if ev.GetName() == "one.txt" && ev.GetType() == pb.EventType_EVENT_TYPE_CREATE {
			t.Error("second poll repeated an event of the first")
		}
	}

	_, err = e.client.RemoveWatcher(ctxT(t), connect.NewRequest(&pb.RemoveWatcherRequest{WatcherId: id}))
	mustDo(t, err)

	tests := []struct {
		name     string
		call     func() error
		wantCode connect.Code
	}{
		{name: "events of a removed watcher", wantCode: connect.CodeNotFound, call: func() error {
			_, err := e.client.GetWatcherEvents(ctxT(t), connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: id}))
			return err
		}},
		{name: "remove twice", wantCode: connect.CodeNotFound, call: func() error {
			_, err := e.client.RemoveWatcher(ctxT(t), connect.NewRequest(&pb.RemoveWatcherRequest{WatcherId: id}))
			return err
		}},
		{name: "unknown id", wantCode: connect.CodeNotFound, call: func() error {
			_, err := e.client.GetWatcherEvents(ctxT(t), connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: "nope"}))
			return err
		}},
		{name: "create on missing path", wantCode: connect.CodeNotFound, call: func() error {
			_, err := e.client.CreateWatcher(ctxT(t), connect.NewRequest(&pb.CreateWatcherRequest{Path: e.path("nope")}))
			return err
		}},
		{name: "create on a file", wantCode: connect.CodeInvalidArgument, call: func() error {
			_, err := e.client.CreateWatcher(ctxT(t), connect.NewRequest(&pb.CreateWatcherRequest{Path: e.path("file.txt")}))
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantCode(t, tt.call(), tt.wantCode)
		})
	}
}

func TestCloseStopsPollingWatchers(t *testing.T) {
	e := newTestEnv(t)
	var ids []string
	for range 3 {
		resp, err := e.client.CreateWatcher(ctxT(t), connect.NewRequest(&pb.CreateWatcherRequest{Path: e.dir}))
		mustDo(t, err)
		ids = append(ids, resp.Msg.GetWatcherId())
	}
	e.svc.mu.Lock()
	var ws []*pollingWatcher
	for _, id := range ids {
		ws = append(ws, e.svc.watchers[id])
	}
	e.svc.mu.Unlock()

	mustDo(t, e.svc.Close())
	for i, w := range ws {
		select {
		case <-w.collected:
		default:
			t.Errorf("watcher %s still collecting after Close", ids[i])
		}
		select {
		case <-w.w.stopped:
		default:
			t.Errorf("watcher %s still running after Close", ids[i])
		}
	}
	_, err := e.client.GetWatcherEvents(ctxT(t), connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: ids[0]}))
	wantCode(t, err, connect.CodeNotFound)
	_, err = e.client.CreateWatcher(ctxT(t), connect.NewRequest(&pb.CreateWatcherRequest{Path: e.dir}))
	wantCode(t, err, connect.CodeUnavailable)
}
