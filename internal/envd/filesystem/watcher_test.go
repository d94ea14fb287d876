package filesystem

import (
	"errors"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/fsnotify/fsnotify"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	pb "github.com/agent-sandbox/agent-sandbox/gen/filesystem"
)

// TestToEvents covers what real inotify rarely produces on demand: one
// fsnotify event carrying several ops.
func TestToEvents(t *testing.T) {
	w := &watcher{root: "/watched", entries: newEntries(slog.New(slog.DiscardHandler))}
	tests := []struct {
		name string
		ev   fsnotify.Event
		want []*pb.FilesystemEvent
	}{
		{
			name: "one op",
			ev:   fsnotify.Event{Name: "/watched/a.txt", Op: fsnotify.Write},
			want: []*pb.FilesystemEvent{{Name: "a.txt", Type: pb.EventType_EVENT_TYPE_WRITE}},
		},
		{
			name: "several ops become several events",
			ev:   fsnotify.Event{Name: "/watched/nested/f", Op: fsnotify.Chmod | fsnotify.Create | fsnotify.Rename},
			want: []*pb.FilesystemEvent{
				{Name: "nested/f", Type: pb.EventType_EVENT_TYPE_CREATE},
				{Name: "nested/f", Type: pb.EventType_EVENT_TYPE_RENAME},
				{Name: "nested/f", Type: pb.EventType_EVENT_TYPE_CHMOD},
			},
		},
		{
			name: "ops without a wire type are dropped",
			ev:   fsnotify.Event{Name: "/watched/x", Op: 0},
			want: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, w.toEvents(tt.ev), protocmp.Transform()); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNetworkFilesystem(t *testing.T) {
	kind, err := networkFilesystem(t.TempDir())
	if errors.Is(err, errors.ErrUnsupported) {
		// Not a CI requirement: other systems have no such check; on
		// Linux, where CI runs, it is tested.
		t.Skip("skipping: filesystem types are only told apart on Linux")
	}
	if err != nil || kind != "" {
		t.Errorf("networkFilesystem(t.TempDir()) = %q, %v; want a local filesystem", kind, err)
	}
	if _, err := networkFilesystem(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("networkFilesystem of a missing path: no error")
	}
}
