package filesystem

import (
	"os"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/agent-sandbox/agent-sandbox/gen/filesystem"
)

func TestMove(t *testing.T) {
	e := newTestEnv(t)
	e.tree(t, "file.txt", "dir/inner.txt", "other.txt", "target.txt", "srcdir/", "a-file")

	tests := []struct {
		name      string
		src, dst  string
		wantType  pb.FileType
		wantCode  connect.Code
		wantBytes string // content of dst/ wantFile after the move
		wantFile  string
	}{
		{name: "file", src: "file.txt", dst: "renamed.txt", wantType: pb.FileType_FILE_TYPE_FILE, wantFile: "renamed.txt", wantBytes: "file.txt"},
		{name: "into missing parents", src: "other.txt", dst: "p/q/other.txt", wantType: pb.FileType_FILE_TYPE_FILE, wantFile: "p/q/other.txt", wantBytes: "other.txt"},
		{name: "directory", src: "dir", dst: "moved", wantType: pb.FileType_FILE_TYPE_DIRECTORY, wantFile: "moved/inner.txt", wantBytes: "dir/inner.txt"},
		{name: "missing source", src: "nope", dst: "x", wantCode: connect.CodeNotFound},
		{name: "directory onto a file", src: "srcdir", dst: "target.txt", wantCode: connect.CodeInvalidArgument},
		{name: "below a file", src: "target.txt", dst: "a-file/x/y", wantCode: connect.CodeInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := connect.NewRequest(&pb.MoveRequest{Source: e.path(tt.src), Destination: e.path(tt.dst)})
			resp, err := e.client.Move(ctxT(t), req)
			wantCode(t, err, tt.wantCode)
			if err != nil {
				return
			}
			if ent := resp.Msg.GetEntry(); ent.GetPath() != e.path(tt.dst) || ent.GetType() != tt.wantType {
				t.Errorf("entry = %v, want %v at %s", ent, tt.wantType, e.path(tt.dst))
			}
			if _, err := os.Lstat(e.path(tt.src)); !os.IsNotExist(err) {
				t.Errorf("source still there: %v", err)
			}
			if b, err := os.ReadFile(e.path(tt.wantFile)); err != nil || string(b) != tt.wantBytes {
				t.Errorf("read %s = %q, %v; want %q", tt.wantFile, b, err, tt.wantBytes)
			}
		})
	}
}
