package sandbox

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"connectrpc.com/connect"

	"github.com/agent-sandbox/agent-sandbox/gen/filesystem"
	"github.com/agent-sandbox/agent-sandbox/gen/filesystem/filesystemconnect"
)

// ErrNoFile is a path that is not in the sandbox (404).
var ErrNoFile = errors.New("no such file or directory")

// Directory is one directory of a sandbox's filesystem, as ListDir
// reads it.
type Directory struct {
	// Path is the directory's absolute path (~ and relative paths
	// resolved against the user's home).
	Path    string
	Entries []*filesystem.EntryInfo
}

// ListDir lists directory path in running sandbox id, one level deep, as
// the template's user, through its envd. A path that is missing is
// ErrNoFile, one that is no directory ErrInvalid.
func (m *Manager) ListDir(ctx context.Context, id, path string) (Directory, error) {
	e, err := m.envd(ctx, id)
	if err != nil {
		return Directory{}, err
	}
	fs := filesystemconnect.NewFilesystemClient(e.http, envdURL)
	stat := connect.NewRequest(&filesystem.StatRequest{Path: path})
	e.authorize(stat.Header())
	st, err := fs.Stat(ctx, stat)
	if err != nil {
		return Directory{}, fileError("reading", path, err)
	}
	dir := st.Msg.GetEntry()
	if dir.GetType() != filesystem.FileType_FILE_TYPE_DIRECTORY {
		return Directory{}, fmt.Errorf("%w: %s is not a directory", ErrInvalid, dir.GetPath())
	}
	list := connect.NewRequest(&filesystem.ListDirRequest{Path: dir.GetPath(), Depth: 1})
	e.authorize(list.Header())
	res, err := fs.ListDir(ctx, list)
	if err != nil {
		return Directory{}, fileError("listing", dir.GetPath(), err)
	}
	return Directory{Path: dir.GetPath(), Entries: res.Msg.GetEntries()}, nil
}

// ReadFile opens file path in running sandbox id for reading, as the
// template's user; the caller closes it. A missing file is ErrNoFile, a
// path that is no regular file ErrInvalid.
func (m *Manager) ReadFile(ctx context.Context, id, path string) (io.ReadCloser, error) {
	res, err := m.files(ctx, id, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	return res.Body, nil
}

// WriteFile writes what r holds to path in running sandbox id, as the
// template's user, creating missing parent directories.
func (m *Manager) WriteFile(ctx context.Context, id, path string, r io.Reader) error {
	res, err := m.files(ctx, id, http.MethodPost, path, r)
	if err != nil {
		return err
	}
	return res.Body.Close()
}

// files calls envd's /files API for path: a download (GET) or a raw
// upload of body (POST). An answer other than 200 is turned into an error.
func (m *Manager) files(ctx context.Context, id, method, path string, body io.Reader) (*http.Response, error) {
	step := map[string]string{http.MethodGet: "reading", http.MethodPost: "writing"}[method]
	e, err := m.envd(ctx, id)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, envdURL+"/files?"+url.Values{"path": {path}, "username": {e.user}}.Encode(), body)
	if err != nil {
		return nil, fmt.Errorf("%s %s in sandbox %s: %w", step, path, id, err)
	}
	e.authorize(req.Header)
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	res, err := e.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s in sandbox %s: %w", step, path, id, err)
	}
	if res.StatusCode == http.StatusOK {
		return res, nil
	}
	defer res.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
	detail := strings.TrimSpace(string(msg))
	switch res.StatusCode {
	case http.StatusNotFound:
		return nil, fmt.Errorf("%w: %s", ErrNoFile, path)
	case http.StatusBadRequest:
		return nil, fmt.Errorf("%w: %s %s: %s", ErrInvalid, step, path, detail)
	case http.StatusInsufficientStorage:
		return nil, fmt.Errorf("%w: writing %s", ErrNoSpace, path)
	}
	return nil, fmt.Errorf("%s %s in sandbox %s: envd answered %s: %s", step, path, id, res.Status, detail)
}

// authorize sets the headers that make an envd call the template user's.
func (e envdConn) authorize(h http.Header) { authorizeEnvd(h, e.user, e.token) }

// authorizeEnvd sets the headers that make an envd call user's, with the
// sandbox's access token.
func authorizeEnvd(h http.Header, user, token string) {
	h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	h.Set("X-Access-Token", token)
}

// fileError turns an envd filesystem error about path into ErrNoFile,
// ErrInvalid or one that names the step.
func fileError(step, path string, err error) error {
	switch connect.CodeOf(err) {
	case connect.CodeNotFound:
		return fmt.Errorf("%w: %s", ErrNoFile, path)
	case connect.CodeInvalidArgument:
		var ce *connect.Error
		errors.As(err, &ce)
		return fmt.Errorf("%w: %s %s: %s", ErrInvalid, step, path, ce.Message())
	}
	return fmt.Errorf("%s %s: %w", step, path, err)
}
