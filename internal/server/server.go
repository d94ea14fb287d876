// Package server wires agent-sandbox serve: the store, the template cache,
// the isolation backend, the sandbox manager, the REST API and the traffic
// router, all behind one listener. It is the only package that knows every
// piece.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/api"
	"github.com/agent-sandbox/agent-sandbox/internal/browser"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/node"
	"github.com/agent-sandbox/agent-sandbox/internal/envd"
	"github.com/agent-sandbox/agent-sandbox/internal/fetch"
	"github.com/agent-sandbox/agent-sandbox/internal/hostlock"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/liveview"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
	"github.com/agent-sandbox/agent-sandbox/internal/router"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
	"github.com/agent-sandbox/agent-sandbox/internal/tlsca"
	"github.com/agent-sandbox/agent-sandbox/internal/volume"
)

// Server is a configured, not yet serving, agent-sandbox server.
type Server struct {
	cfg       Config
	log       *slog.Logger
	progress  io.Writer
	store     *store.Store
	templates *template.Builder
	builtIns  *builtIns
	builds    *api.TemplateBuilds
	volumes   *volume.Service
	manager   *sandbox.Manager
	router    *router.Router
	browsers  *browser.Sessions
	net       *sandboxNetwork
	// nodeAgent keeps this node's Lease in cluster mode; nil outside it.
	nodeAgent *node.Agent
	// releaseHost gives back the host lock on sandbox networking.
	releaseHost func()
	handler     http.Handler
	ready       atomic.Bool
	apiKey      string // printed for the user; "" when none is known in plain text
}

// New opens the data directory and builds every component. Nothing runs
// until Run.
func New(ctx context.Context, cfg Config, log *slog.Logger, progress io.Writer) (_ *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating data directory: %w", err)
	}
	st, err := store.Open(ctx, DBPath(cfg.DataDir))
	if err != nil {
		return nil, fmt.Errorf("opening the store: %w", err)
	}
	defer func() {
		if err != nil {
			st.Close()
		}
	}()
	s := &Server{cfg: cfg, log: log, progress: progress, store: st}
	if s.releaseHost, err = hostlock.Acquire(hostlock.Path, "agent-sandbox serve --data-dir "+cfg.DataDir, false); err != nil {
		return nil, fmt.Errorf("%w: one server per host runs sandboxes (their firewall, addresses and veths are host-wide); stop it first, or measure it with bench --server URL", err)
	}
	defer func() {
		if err != nil {
			s.releaseHost()
		}
	}()
	if s.apiKey, err = s.ensureAPIKeys(ctx); err != nil {
		return nil, err
	}
	s.templates = &template.Builder{DataDir: cfg.DataDir, Mirror: cfg.Mirror, Log: log.With("component", "template"), Progress: progress}
	s.builtIns = newBuiltIns(ctx, s.templates, log.With("component", "template"), progress)
	if s.net, err = newSandboxNetwork(cfg, log); err != nil {
		return nil, err
	}
	// Registry pulls are made for API callers: under the egress ranges.
	registries, err := fetch.New(fetch.Config{Allow: cfg.Registries, SandboxPools: []netip.Prefix{s.net.pool.Prefix()}})
	if err != nil {
		return nil, err
	}
	s.templates.RegistryTransport = registries.Transport()
	if s.volumes, err = newVolumes(ctx, cfg, st); err != nil {
		return nil, err
	}
	backend, others, err := newBackends(cfg, log, s.net.host)
	if err != nil {
		return nil, err
	}
	// Before the manager adopts surviving sandboxes (in Run).
	if err := s.net.host.Prepare(ctx); err != nil {
		return nil, err
	}
	s.manager, err = sandbox.New(sandbox.Config{
		Store:            st,
		Backend:          backend,
		OtherBackends:    others,
		TemplateBackends: cfg.TemplateBackends,
		Templates:        templateRegistry{builder: s.templates, store: st, builtIns: s.builtIns},
		Images:           s.templates,
		EnvdPath:         cfg.EnvdPath,
		Tools:            map[string]string{template.CodeInterpreterServer: cfg.CodeInterpPath},
		Log:              log.With("component", "sandbox"),
		Network:          s.net.gateway,
		MaxBandwidth: network.Bandwidth{
			Down: uint64(cfg.BandwidthMbit * 1e6),
			Up:   uint64(cfg.BandwidthMbit * 1e6),
		},
		WarmPools:       cfg.WarmPools,
		MaxSandboxes:    cfg.MaxSandboxes,
		DiskDir:         sandboxesDir(cfg),
		DiskReserve:     cfg.DiskReserve,
		PausedRetention: cfg.PausedRetention,
		MaxTimeout:      maxTimeout(cfg.MaxTimeout),
		PauseInRAM:      cfg.PauseInRAM,
		SnapshotDir:     filepath.Join(cfg.DataDir, "snapshots"),
		SnapshotBudget:  cfg.SnapshotBudget,
		Volumes:         s.volumes,
		DefaultCPU:      cfg.CPUCount,
		DefaultMemory:   cfg.MemoryMB,
		DefaultDiskIO:   cfg.DiskIO,
		Max:             cfg.maxima(),
		BuildNetwork:    s.net.builds,
		StepResources: isolation.Resources{
			MemoryMB:   cfg.BuildMemoryMB,
			DiskSizeMB: cfg.BuildDiskMB,
			DiskIO:     cfg.DiskIO,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("setting up the sandbox manager: %w", err)
	}
	// Every build step that runs a command runs in a sandbox of its own.
	s.templates.Steps = s.manager
	s.templates.StepTimeout, s.templates.BuildTimeout = cfg.BuildStepTimeout, cfg.BuildTimeout
	s.templates.ReadyTimeout = cfg.BuildReadyTimeout
	if s.builds, err = api.NewTemplateBuilds(ctx, api.TemplateConfig{
		Builder:         apiBuilder{s.templates},
		Records:         st,
		MaxContextBytes: cfg.MaxBuildContext,
		Log:             log.With("component", "template-api"),
		Max:             cfg.maxima(),
		SandboxDiskMB:   sandbox.DefaultDiskMB,
		Defaults:        sandbox.Maxima{CPUCount: cfg.CPUCount, MemoryMB: cfg.MemoryMB},
		BuiltIns:        s.builtIns.states,
	}); err != nil {
		return nil, fmt.Errorf("setting up template builds: %w", err)
	}
	if s.nodeAgent, err = s.newNodeAgent(log.With("component", "cluster")); err != nil {
		return nil, err
	}
	if s.handler, err = s.routes(); err != nil {
		return nil, err
	}
	return s, nil
}

// Builder is the server's template builder, whose steps run in the
// server's sandboxes: what `template build` uses, between New and Close,
// on a server it never runs.
func (s *Server) Builder() *template.Builder { return s.templates }

// Close releases what New took, for a Server that does not Run.
func (s *Server) Close() {
	s.net.gateway.Close()
	s.net.builds.Close()
	s.router.Close()
	s.browsers.Close()
	s.store.Close()
	s.releaseHost()
}

// defaultKeyFile keeps the key the server generated on first start, so it
// can print ready-to-paste settings on every start (the store keeps hashes
// only).
func (s *Server) defaultKeyFile() string { return filepath.Join(s.cfg.DataDir, "default-api-key") }

// ensureAPIKeys registers the configured keys and makes sure at least one
// key exists. It returns a key to show the user.
func (s *Server) ensureAPIKeys(ctx context.Context) (string, error) {
	for _, k := range s.cfg.APIKeys {
		if _, err := s.store.AddAPIKey(ctx, "from --api-key", k); err != nil {
			return "", fmt.Errorf("adding --api-key: %w", err)
		}
	}
	if len(s.cfg.APIKeys) > 0 {
		return s.cfg.APIKeys[0], nil
	}
	if b, err := os.ReadFile(s.defaultKeyFile()); err == nil {
		key := strings.TrimSpace(string(b))
		if _, err := s.store.VerifyAPIKey(ctx, key); err == nil {
			return key, nil
		}
	}
	keys, err := s.store.ListAPIKeys(ctx)
	if err != nil {
		return "", fmt.Errorf("listing API keys: %w", err)
	}
	if len(keys) > 0 {
		return "", nil // the operator manages keys; none to print
	}
	key, _, err := s.store.CreateAPIKey(ctx, "default", 0)
	if err != nil {
		return "", fmt.Errorf("creating the default API key: %w", err)
	}
	if err := os.WriteFile(s.defaultKeyFile(), []byte(key+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("saving the default API key: %w", err)
	}
	return key, nil
}

// Run serves until ctx is done. The listener opens at once (GET /health
// answers 503 until ready); the base template is built first if missing.
func (s *Server) Run(ctx context.Context, stdout io.Writer) error {
	defer s.releaseHost()
	defer s.store.Close()
	defer s.router.Close()
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", s.cfg.Listen, err)
	}
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	if s.cfg.TLS {
		ca, err := tlsca.Open(filepath.Join(s.cfg.DataDir, "tls"))
		if err != nil {
			return fmt.Errorf("opening the TLS CA: %w", err)
		}
		cert, err := ca.ServerCertificate(s.cfg.Domain, s.certHosts()...)
		if err != nil {
			return err
		}
		hs.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}
		ln = tls.NewListener(ln, hs.TLSConfig)
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	defer s.net.gateway.Close()
	defer s.net.builds.Close()
	dropsCtx, stopDrops := context.WithCancel(ctx)
	defer stopDrops()
	go s.net.recordDrops(dropsCtx, s.log)

	if err := s.prepare(ctx); err != nil {
		hs.Close()
		return err
	}
	s.ready.Store(true)
	s.printSettings(stdout)
	s.builtIns.start(s.cfg.Templates...)
	// In cluster mode the node joins once it can take sandboxes; an agent
	// that cannot start (no RBAC, no API server) stops the server.
	agentErr := make(chan error, 1)
	agentDone := make(chan struct{})
	if s.nodeAgent != nil {
		go func() {
			defer close(agentDone)
			agentErr <- s.nodeAgent.Run(ctx)
		}()
	} else {
		close(agentDone)
	}

	select {
	case err := <-errc:
		s.builtIns.close()
		s.builds.Close()
		s.manager.Close()
		return fmt.Errorf("serving: %w", err)
	case err := <-agentErr:
		if err != nil {
			hs.Close()
			s.builtIns.close()
			s.builds.Close()
			return errors.Join(fmt.Errorf("cluster: %w", err), s.manager.Close())
		}
	case <-ctx.Done():
	}
	// A kill or create the agent has begun ends before the manager closes
	// (which waits for the kill's teardown): one cut off by the exit
	// leaves the sandbox's network namespace, veth and cgroups behind.
	<-agentDone
	s.log.Info("shutting down; sandboxes keep running and are adopted on the next start")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutdownCtx); err != nil {
		hs.Close() // streams never go idle by themselves
	}
	s.browsers.Close()
	s.builtIns.close()
	s.builds.Close()
	return s.manager.Close()
}

// prepare builds the base template if needed and reconciles sandboxes.
// The other built-in templates are built in the background (builtIns).
func (s *Server) prepare(ctx context.Context) error {
	if _, err := s.templates.Ensure(ctx, template.Base()); err != nil {
		return fmt.Errorf("preparing the %s template: %w", template.BaseName, err)
	}
	if err := s.manager.Start(ctx); err != nil {
		return fmt.Errorf("starting the sandbox manager: %w", err)
	}
	return nil
}

// printSettings prints the environment that points the E2B SDKs here.
func (s *Server) printSettings(w io.Writer) {
	key := s.apiKey
	if key == "" {
		key = "<a key from `agent-sandbox keys create`>"
	}
	scheme := "http"
	if s.cfg.TLS {
		scheme = "https"
	}
	base := scheme + "://" + s.listenURLHost()
	caPath := filepath.Join(s.cfg.DataDir, "tls", "ca.pem")
	fmt.Fprintf(w, "\nagent-sandbox is ready on %s\n\nPoint the E2B SDK at it (header routing over one URL):\n\n", base)
	// The volume content API has a URL of its own in the SDKs.
	fmt.Fprintf(w, "  export E2B_API_URL=%s\n  export E2B_SANDBOX_URL=%s\n  export E2B_VOLUME_API_URL=%s\n  export E2B_DOMAIN=%s\n  export E2B_API_KEY=%s\n",
		base, base, base, s.cfg.Domain, key)
	if s.cfg.TLS {
		fmt.Fprintf(w, "  export NODE_EXTRA_CA_CERTS=%s\n", caPath)
	}
	fmt.Fprintln(w)
	if s.cfg.TLS {
		fmt.Fprintf(w, "or with host routing (api.%[1]s and *.%[1]s must resolve to this machine):\n\n", s.cfg.Domain)
		fmt.Fprintf(w, "  export E2B_DOMAIN=%s\n  export NODE_EXTRA_CA_CERTS=%s\n  export E2B_API_KEY=%s\n\n",
			s.cfg.Domain, caPath, key)
	}
	// Where each built-in template other than base stands.
	var ready, onDemand []string
	for _, name := range slices.Sorted(maps.Keys(template.BuiltIn())) {
		switch _, err := s.templates.Lookup(name); {
		case name == template.BaseName || slices.Contains(s.cfg.Templates, name):
		case err == nil:
			ready = append(ready, name)
		default:
			onDemand = append(onDemand, name)
		}
	}
	fmt.Fprintln(w, "Built-in templates:")
	for _, l := range []struct {
		what  string
		names []string
	}{{"ready", append([]string{template.BaseName}, ready...)}, {"building in the background (--templates)", s.cfg.Templates},
		{"built on first use", onDemand}} {
		if len(l.names) > 0 {
			fmt.Fprintf(w, "  %s: %s\n", l.what, strings.Join(l.names, ", "))
		}
	}
	fmt.Fprint(w, "Until a template is built, its creates are answered 503 with the build's progress and Retry-After.\n\n")
}

// certHosts are the names and addresses besides the domain that clients
// reach the server by, for its TLS certificate: the listen address, which
// the printed header-routing settings use (127.0.0.1 for an unspecified
// one, which covers loopback only: other addresses are not printed), and
// localhost on loopback.
func (s *Server) certHosts() []string {
	host, _, _ := net.SplitHostPort(s.cfg.Listen) // validated
	ip := net.ParseIP(host)
	switch {
	case host == "" || ip != nil && ip.IsUnspecified():
		return []string{"127.0.0.1", "::1", "localhost"}
	case ip != nil && ip.IsLoopback():
		return []string{host, "localhost"}
	}
	return []string{host}
}

// listenURLHost is the host:port clients use for the listen address.
func (s *Server) listenURLHost() string {
	host, port, _ := net.SplitHostPort(s.cfg.Listen) // validated
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// routes puts the API and the sandbox router behind one handler: the router
// takes every request addressed to a sandbox (by host or by E2B headers),
// the API the rest.
func (s *Server) routes() (http.Handler, error) {
	tools, err := s.mcpTools()
	if err != nil {
		return nil, err
	}
	s.browsers = browser.NewSessions(s.manager, template.DevToolsPort, func(err error) bool { return errors.Is(err, isolation.ErrPortClosed) })
	links, err := liveViewSigner(s.cfg.DataDir)
	if err != nil {
		return nil, err
	}
	apiHandler, err := api.New(api.Config{
		Sandboxes:      s.manager,
		Keys:           s.store,
		APIKeys:        s.store,
		EnvdVersion:    envd.Version,
		Domain:         s.cfg.Domain,
		Templates:      s.builds,
		Ready:          s.ready.Load,
		DefaultTimeout: s.cfg.DefaultTimeout,
		Volumes:        s.volumes,
		MCP:            tools,
		Browsers:       s.browsers,
		LiveView:       links,
		Log:            s.log.With("component", "api"),
	})
	if err != nil {
		return nil, fmt.Errorf("setting up the API: %w", err)
	}
	s.router, err = router.New(router.Config{
		Dialer: s.manager, Ingress: s.manager, Waker: s.manager, LiveView: links, BrowserView: liveview.NewBrowserView(s.browsers),
		Domain: s.cfg.Domain, Log: s.log.With("component", "router"),
	})
	if err != nil {
		return nil, fmt.Errorf("setting up the router: %w", err)
	}
	return s.router.Front(apiHandler), nil
}

// maxTimeout is the manager's limit for --max-timeout d (0: none).
func maxTimeout(d time.Duration) time.Duration {
	if d == 0 {
		return sandbox.NoTimeoutLimit
	}
	return d
}

// newVolumes sets up the volumes: ext4 images under DATA/volumes, mounted
// under /run/agent-sandbox/volumes, and what a crash left of them removed.
func newVolumes(ctx context.Context, cfg Config, st *store.Store) (*volume.Service, error) {
	svc, err := volume.New(volume.Config{
		Records: st,
		Storage: &volume.ImageStorage{Dir: filepath.Join(cfg.DataDir, "volumes"), MountDir: filepath.Join(filepath.Dir(hostlock.Path), "volumes")},
		Size:    int64(cfg.VolumeSize),
		KeyFile: filepath.Join(cfg.DataDir, "volume-token.key"),
	})
	if err != nil {
		return nil, err
	}
	if err := svc.Sweep(ctx); err != nil {
		return nil, fmt.Errorf("cleaning up volumes: %w", err)
	}
	return svc, nil
}
