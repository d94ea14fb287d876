package codeinterp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Config configures a Server.
type Config struct {
	// Runtimes holds a Factory per canonical language ("python",
	// "javascript", "bash", ...). TypeScript uses the "typescript" entry if
	// there is one and the "javascript" one otherwise.
	Runtimes map[string]Factory
	// DefaultCwd is the working directory of contexts created without one
	// (default /home/user).
	DefaultCwd string
	// EnvdURL is the base URL of envd, asked for the sandbox-wide
	// environment with GET /envs (default http://127.0.0.1:49983).
	EnvdURL string
	// Log receives the server's logs (default: discarded).
	Log *slog.Logger
	// Keepalive is the silence after which /execute writes a keepalive
	// line (default 5s).
	Keepalive time.Duration
}

const (
	defaultCwd       = "/home/user"
	defaultEnvdURL   = "http://127.0.0.1:49983"
	defaultKeepalive = 5 * time.Second
	defaultLanguage  = "python"
)

// Server is the code interpreter HTTP server. Create it with New.
type Server struct {
	cfg  Config
	log  *slog.Logger
	envd *http.Client

	// wg tracks background runtime replacements, so Close can wait for them.
	wg sync.WaitGroup

	mu sync.Mutex // guards the fields below
	// contexts holds the live contexts by id; order lists them in creation order.
	contexts map[string]*execContext
	order    []*execContext
	// defaults maps a language to the id of its default context.
	defaults map[string]string
	// defaultLocks serializes the lazy creation of a language's default context.
	defaultLocks map[string]*sync.Mutex
	closed       bool
}

// New returns a Server for cfg, with defaults filled in.
func New(cfg Config) (*Server, error) {
	if len(cfg.Runtimes) == 0 {
		return nil, errors.New("codeinterp: no runtimes configured")
	}
	if cfg.DefaultCwd == "" {
		cfg.DefaultCwd = defaultCwd
	}
	if cfg.EnvdURL == "" {
		cfg.EnvdURL = defaultEnvdURL
	}
	cfg.EnvdURL = strings.TrimRight(cfg.EnvdURL, "/")
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Keepalive <= 0 {
		cfg.Keepalive = defaultKeepalive
	}
	return &Server{
		cfg:          cfg,
		log:          cfg.Log,
		envd:         &http.Client{Timeout: envsTimeout},
		contexts:     make(map[string]*execContext),
		defaults:     make(map[string]string),
		defaultLocks: make(map[string]*sync.Mutex),
	}, nil
}

// Handler returns the HTTP handler of the protocol's endpoints.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", s.handleHealth)
	mux.HandleFunc("POST /execute", s.handleExecute)
	mux.HandleFunc("POST /contexts", s.handleCreateContext)
	mux.HandleFunc("GET /contexts", s.handleListContexts)
	mux.HandleFunc("POST /contexts/{id}/restart", s.handleRestartContext)
	mux.HandleFunc("DELETE /contexts/{id}", s.handleDeleteContext)
	return mux
}

// Start creates the default contexts for python and javascript, for those
// of the two that have a runtime, as the official server does at start-up.
// A context that cannot be created is logged and left to be created lazily
// by the first execution that names its language.
func (s *Server) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, lang := range []string{"python", "javascript"} {
		if s.factory(lang) == nil {
			continue
		}
		wg.Go(func() {
			if _, err := s.defaultContext(ctx, lang); err != nil {
				s.log.Error("creating default context", "language", lang, "err", err)
			}
		})
	}
	wg.Wait()
	return ctx.Err()
}

// Close ends every context's runtime. Executions in progress end with an
// error line.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	all := s.order
	s.order, s.contexts, s.defaults = nil, map[string]*execContext{}, map[string]string{}
	s.mu.Unlock()
	for _, c := range all {
		c.close()
	}
	s.wg.Wait()
}

func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, "OK")
}

// errUnsupportedLanguage is returned for a language without a runtime.
var errUnsupportedLanguage = errors.New("unsupported language")

// normalizeLanguage maps a requested language to its canonical name:
// absent is python, names are trimmed and lower-cased, js is javascript and
// ts is typescript.
func normalizeLanguage(lang string) string {
	lang = strings.ToLower(strings.TrimSpace(lang))
	switch lang {
	case "":
		return defaultLanguage
	case "js":
		return "javascript"
	case "ts":
		return "typescript"
	}
	return lang
}

// factory returns the Factory for a canonical language, or nil.
func (s *Server) factory(lang string) Factory {
	if f := s.cfg.Runtimes[lang]; f != nil {
		return f
	}
	if lang == "typescript" {
		return s.cfg.Runtimes["javascript"]
	}
	return nil
}

// languages lists the languages the server can run, sorted.
func (s *Server) languages() []string {
	var langs []string
	for l, f := range s.cfg.Runtimes {
		if f != nil {
			langs = append(langs, l)
		}
	}
	if s.cfg.Runtimes["javascript"] != nil && s.cfg.Runtimes["typescript"] == nil {
		langs = append(langs, "typescript")
	}
	slices.Sort(langs)
	return langs
}

func (s *Server) unsupported(lang string) error {
	return fmt.Errorf("%w %q: supported languages are %s", errUnsupportedLanguage, lang, strings.Join(s.languages(), ", "))
}

// decodeBody decodes a JSON request body into v; an empty body leaves v as is.
func decodeBody(r *http.Request, v any) error {
	err := json.NewDecoder(io.LimitReader(r.Body, maxBody)).Decode(v)
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// maxBody bounds a request body (code included).
const maxBody = 64 << 20

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client is gone if this fails
}

func writeText(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, msg)
}
