package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// ErrNoBrowser is returned when nothing in the sandbox serves DevTools.
var ErrNoBrowser = errors.New("no browser in the sandbox (nothing serves DevTools)")

// Dialer opens a connection to a port inside a sandbox; *sandbox.Manager
// implements it.
type Dialer interface {
	Dial(ctx context.Context, id string, port int) (net.Conn, error)
}

// Sessions holds one Session per sandbox, opened on first use and dropped
// when its connection ends (the sandbox paused, killed, or Chromium
// restarted), to be opened again by the next action.
type Sessions struct {
	dialer Dialer
	port   int
	// host is the Host Chromium's DevTools server accepts (an IP address:
	// its guard against DNS rebinding), and so the host of its URLs.
	host string
	// noBrowser tells a dial error that means "nothing listens" apart
	// from others; it wraps such errors in ErrNoBrowser.
	noBrowser func(error) bool

	mu       sync.Mutex // guards sessions
	sessions map[string]*Session
}

// NewSessions returns sessions with Chromium's DevTools on port of each
// sandbox, dialed through d; noBrowser reports whether a dial error means
// the port is closed (no Chromium in the sandbox).
func NewSessions(d Dialer, port int, noBrowser func(error) bool) *Sessions {
	return &Sessions{
		dialer: d, port: port, host: "127.0.0.1:" + strconv.Itoa(port),
		noBrowser: noBrowser, sessions: map[string]*Session{},
	}
}

// Get returns sandbox id's session, attaching to its page if there is
// none yet.
func (s *Sessions) Get(ctx context.Context, id string) (*Session, error) {
	s.mu.Lock()
	sess, ok := s.sessions[id]
	s.mu.Unlock()
	if ok {
		return sess, nil
	}
	sess, err := s.open(ctx, id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if prev, ok := s.sessions[id]; ok { // another request attached meanwhile: use one session
		go sess.conn.Close()
		return prev, nil
	}
	s.sessions[id] = sess
	return sess, nil
}

// Close closes every session.
func (s *Sessions) Close() {
	s.mu.Lock()
	all := s.sessions
	s.sessions = map[string]*Session{}
	s.mu.Unlock()
	for _, sess := range all {
		sess.conn.Close()
	}
}

// open attaches to the first page Chromium lists in sandbox id (opening one
// if it lists none) and enables the events the actions wait on.
func (s *Sessions) open(ctx context.Context, id string) (*Session, error) {
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := s.dialer.Dial(ctx, id, s.port)
			if err != nil && s.noBrowser(err) {
				return nil, fmt.Errorf("%w: %w", ErrNoBrowser, err)
			}
			return c, err
		},
		DisableKeepAlives: true,
	}}
	defer hc.CloseIdleConnections()
	target, err := s.pageTarget(ctx, hc)
	if err != nil {
		return nil, err
	}
	ws, _, err := websocket.Dial(ctx, "ws://"+s.host+"/devtools/page/"+target, &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		return nil, fmt.Errorf("attaching to page %s: %w", target, err)
	}
	var sess *Session
	c := newConn(ws, func() {
		s.mu.Lock()
		if s.sessions[id] == sess {
			delete(s.sessions, id)
		}
		s.mu.Unlock()
	})
	sess = newSession(c)
	if err := sess.enable(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return sess, nil
}

// pageTarget returns the id of the first page in Chromium's target list,
// or of a blank one it opens when there is none.
func (s *Sessions) pageTarget(ctx context.Context, hc *http.Client) (string, error) {
	var targets []struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	}
	if err := s.devToolsJSON(ctx, hc, http.MethodGet, "/json/list", &targets); err != nil {
		return "", err
	}
	for _, t := range targets {
		if t.Type == "page" {
			return t.ID, nil
		}
	}
	var created struct {
		ID string `json:"id"`
	}
	if err := s.devToolsJSON(ctx, hc, http.MethodPut, "/json/new?about:blank", &created); err != nil {
		return "", err
	}
	return created.ID, nil
}

// devToolsJSON asks Chromium's DevTools HTTP server for path and decodes
// the JSON answer into v.
func (s *Sessions) devToolsJSON(ctx context.Context, hc *http.Client, method, path string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+s.host+path, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("asking DevTools for %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("asking DevTools for %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("decoding DevTools' %s: %w", path, err)
	}
	return nil
}
