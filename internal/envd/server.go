package envd

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/gen/filesystem/filesystemconnect"
	"github.com/agent-sandbox/agent-sandbox/gen/process/processconnect"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/files"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/filesystem"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/httpjson"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/process"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/state"
)

// Version is the E2B envd version this daemon is wire-compatible with. The
// SDKs gate features on it (spec §3.6); 0.6.4 is the newest gate, and every
// feature up to it is implemented.
const Version = "0.6.4"

// unauthorizedMessage is the exact text the reference envd answers with.
const unauthorizedMessage = "unauthorized access, please provide a valid access token or method signing if supported"

// Server is envd's HTTP surface: the two Connect services and the plain
// endpoints. It owns the services' long-lived goroutines; call Close.
type Server struct {
	state      *state.State
	log        *slog.Logger
	process    *process.Service
	filesystem *filesystem.Service
	handler    http.Handler
}

// NewServer builds the handler tree around st.
func NewServer(st *state.State, log *slog.Logger) *Server {
	s := &Server{
		state:      st,
		log:        log,
		process:    process.NewService(st, log),
		filesystem: filesystem.NewService(st, log),
	}

	mux := http.NewServeMux()
	mux.Handle(processconnect.NewProcessHandler(s.process))
	mux.Handle(filesystemconnect.NewFilesystemHandler(s.filesystem))
	mux.Handle("/files", files.NewHandler(st, log))
	mux.HandleFunc("GET /health", handleHealth)
	mux.HandleFunc("POST /init", s.handleInit)
	mux.HandleFunc("GET /envs", s.handleEnvs)
	mux.HandleFunc("GET /metrics", s.handleMetrics)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpjson.Error(w, http.StatusNotFound, "no route for "+r.Method+" "+r.URL.Path)
	})
	s.handler = withCORS(s.requireToken(zeroTimeoutMeansNone(mux)))
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Close stops the filesystem watchers and kills the processes envd started.
func (s *Server) Close() error {
	return errors.Join(s.filesystem.Close(), s.process.Close())
}

// zeroTimeoutMeansNone drops "Connect-Timeout-Ms: 0". The contract reads it
// as "no limit" (as when the header is absent), while connect-go would treat
// it as a deadline that has already passed.
func zeroTimeoutMeansNone(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Connect-Timeout-Ms") == "0" {
			r.Header.Del("Connect-Timeout-Ms")
		}
		next.ServeHTTP(w, r)
	})
}

func handleHealth(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleEnvs(w http.ResponseWriter, _ *http.Request) {
	httpjson.Write(w, http.StatusOK, s.state.EnvVars())
}

// requireToken enforces X-Access-Token once /init has set one. /health is
// public; /files checks the token or a URL signature itself; /init proves
// the old token on its own terms.
func (s *Server) requireToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		exempt := r.Method == http.MethodOptions ||
			r.URL.Path == "/health" || r.URL.Path == "/files" || r.URL.Path == "/init"
		if !exempt && !s.state.TokenMatches(r.Header.Get("X-Access-Token")) {
			httpjson.Error(w, http.StatusUnauthorized, unauthorizedMessage)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// exposedHeaders are the response headers a browser client must be able to
// read: Connect's protocol headers and the file download headers.
var exposedHeaders = strings.Join([]string{
	"Connect-Protocol-Version", "Connect-Content-Encoding", "Connect-Accept-Encoding",
	"Grpc-Status", "Grpc-Message", "Grpc-Status-Details-Bin",
	"Content-Encoding", "Content-Disposition", "Content-Length", "Content-Range",
	"X-Envd-Version",
}, ", ")

// withCORS lets the SDK run in a browser: any origin, any request header.
func withCORS(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		if origin := r.Header.Get("Origin"); origin != "" {
			h.Set("Access-Control-Allow-Origin", origin)
			h.Add("Vary", "Origin")
		} else {
			h.Set("Access-Control-Allow-Origin", "*")
		}
		h.Set("Access-Control-Expose-Headers", exposedHeaders)
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS")
			if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
				h.Set("Access-Control-Allow-Headers", req)
			}
			h.Set("Access-Control-Max-Age", "7200")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next.ServeHTTP(w, r)
	})
}
