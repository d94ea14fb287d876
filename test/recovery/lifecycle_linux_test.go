package recovery

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/client"
	"github.com/agent-sandbox/agent-sandbox/internal/mountinfo"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv/servertest"
)

// TestCrashKeepsSnapshotsAndVolumes takes a snapshot, writes a volume
// (from a sandbox that mounts it and through the content API) and pauses
// a sandbox with its file system only, then kills the server with
// SIGKILL. The restarted server loses none of it: a sandbox starts from
// the snapshot with its files, the volume holds both writes (read through
// the content API and in a new sandbox), and the paused sandbox resumes
// with its files. Everything is removed at the end, mounts included.
func TestCrashKeepsSnapshotsAndVolumes(t *testing.T) {
	testenv.RequireRoot(t)
	srv := newServer(t, jailBackend.name)
	srv.Start()
	c := srv.Client()
	ctx := t.Context()
	tag := servertest.RandomHex(t, 6)

	src, err := c.CreateSandbox(ctx, client.CreateOptions{Timeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	run(t, src, "echo "+tag+" > /home/user/snapshotted")
	var snap struct{ SnapshotID string }
	srv.api(http.MethodPost, "/sandboxes/"+src.ID+"/snapshots", "{}", http.StatusCreated, &snap)

	var vol struct{ VolumeID, Name, Token string }
	srv.api(http.MethodPost, "/volumes", `{"name":"recovery-`+tag+`"}`, http.StatusCreated, &vol)
	t.Cleanup(func() {
		// A test stopped half-way leaves the volume mounted on the host.
		mps, err := mountinfo.Under(filepath.Join(runDir, "volumes", vol.VolumeID))
		if err != nil {
			t.Error(err)
		}
		for _, mp := range mps {
			if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil {
				t.Errorf("unmounting %s: %v", mp, err)
			}
		}
	})
	writer := srv.createWith(c, `{"templateID":"base","volumeMounts":[{"name":"`+vol.Name+`","path":"/data"}]}`)
	run(t, writer, "echo from-sandbox > /data/a")
	srv.content(vol.VolumeID, vol.Token, http.MethodPut, "/file?path=/b", "from-api", http.StatusCreated)

	paused, err := c.CreateSandbox(ctx, client.CreateOptions{Timeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	run(t, paused, "echo kept > /home/user/paused")
	srv.api(http.MethodPost, "/sandboxes/"+paused.ID+"/pause", `{"memory":false}`, http.StatusNoContent, nil)

	srv.Kill9()
	srv.Start()

	fromSnap, err := c.CreateSandbox(ctx, client.CreateOptions{Template: snap.SnapshotID, Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatalf("creating from snapshot %s after the crash: %v", snap.SnapshotID, err)
	}
	if got := run(t, fromSnap, "cat /home/user/snapshotted"); got != tag+"\n" {
		t.Errorf("the snapshot's file reads %q after the crash", got)
	}
	srv.api(http.MethodGet, "/volumes/"+vol.VolumeID, "", http.StatusOK, &vol) // a fresh token
	for path, want := range map[string]string{"/a": "from-sandbox\n", "/b": "from-api"} {
		if got := srv.content(vol.VolumeID, vol.Token, http.MethodGet, "/file?path="+path, "", http.StatusOK); got != want {
			t.Errorf("volume file %s reads %q after the crash, want %q", path, got, want)
		}
	}
	reader := srv.createWith(c, `{"templateID":"base","volumeMounts":[{"name":"`+vol.Name+`","path":"/data"}]}`)
	if got := run(t, reader, "cat /data/a /data/b"); got != "from-sandbox\nfrom-api" {
		t.Errorf("a new sandbox reads the volume as %q", got)
	}
	resumed, err := c.Connect(ctx, paused.ID, client.ConnectOptions{})
	if err != nil {
		t.Fatalf("resuming the sandbox paused before the crash: %v", err)
	}
	if got := run(t, resumed, "cat /home/user/paused"); got != "kept\n" {
		t.Errorf("the paused sandbox's file reads %q", got)
	}

	for _, id := range []string{src.ID, writer.ID, paused.ID, fromSnap.ID, reader.ID} {
		if err := c.KillSandbox(ctx, id); err != nil {
			t.Errorf("killing %s: %v", id, err)
		}
	}
	srv.api(http.MethodDelete, "/templates/"+url.PathEscape(snap.SnapshotID), "", http.StatusNoContent, nil)
	srv.api(http.MethodDelete, "/volumes/"+vol.VolumeID, "", http.StatusNoContent, nil)
	srv.Stop()
	if ms := servertest.MountsMentioning(t, vol.VolumeID); len(ms) > 0 {
		t.Errorf("the volume is still mounted: %v", ms)
	}
	for _, dir := range []string{"snapshots", "volumes"} {
		if entries, err := os.ReadDir(filepath.Join(srv.DataDir, dir)); err != nil && !errors.Is(err, os.ErrNotExist) || len(entries) > 0 {
			t.Errorf("left in %s: %v %v", dir, entries, err)
		}
	}
}

// api sends a control-plane request with the API key and decodes the
// answer into out, failing the test unless it has status want.
func (s *serverProc) api(method, path, body string, want int, out any) {
	s.t.Helper()
	req, err := http.NewRequest(method, "http://"+s.Listen+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("X-API-Key", s.APIKey)
	req.Header.Set("Content-Type", "application/json")
	if got := s.send(req, want); out != nil {
		if err := json.Unmarshal([]byte(got), out); err != nil {
			s.t.Fatalf("%s %s: %v: %s", method, path, err, got)
		}
	}
}

// content sends a volume content request with the volume's token and
// returns the body, failing the test unless it has status want.
func (s *serverProc) content(volumeID, token, method, route, body string, want int) string {
	s.t.Helper()
	req, err := http.NewRequest(method, "http://"+s.Listen+"/volumecontent/"+volumeID+route, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	return s.send(req, want)
}

func (s *serverProc) send(req *http.Request, want int) string {
	s.t.Helper()
	res, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != want {
		s.t.Fatalf("%s %s: %d %s, want %d", req.Method, req.URL.Path, res.StatusCode, bytes.TrimSpace(b), want)
	}
	return string(b)
}

// createWith creates a sandbox from a raw create body (for what the Go
// client does not carry) and connects to it.
func (s *serverProc) createWith(c *client.Client, body string) *client.Sandbox {
	s.t.Helper()
	var sb struct{ SandboxID string }
	s.api(http.MethodPost, "/v2/sandboxes", body, http.StatusCreated, &sb)
	h, err := c.Connect(s.t.Context(), sb.SandboxID, client.ConnectOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	return h
}
