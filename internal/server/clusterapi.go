package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/api"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/control"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/replica"
	"github.com/agent-sandbox/agent-sandbox/internal/envd"
	"github.com/agent-sandbox/agent-sandbox/internal/router"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// RunAPI runs an API replica of cluster mode (`serve --cluster kubernetes
// --role api`) until ctx ends: the E2B API over the namespace's Sandbox
// objects, sandbox traffic forwarded to the node of each sandbox, a cache of those objects and of the nodes, and a candidate for
// leader that, while leading, marks Lost the sandboxes of nodes whose
// Lease expired and collects the objects that ended (control.Collector).
// A replica holds no state, so it needs no data directory,
// no host lock and no root.
func RunAPI(ctx context.Context, cfg Config, log *slog.Logger, stdout io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Cluster.Mode != ClusterKubernetes || cfg.Cluster.Role != RoleAPI {
		return errors.New("an API replica needs --cluster kubernetes --role api")
	}
	if cfg.TLS {
		return errors.New("--tls is not supported with --role api yet: terminate TLS in front of the replicas (an Ingress)")
	}
	keys, err := replica.NewKeys(cfg.APIKeys...)
	if err != nil {
		return err
	}
	kc, err := cfg.Cluster.kubeConfig()
	if err != nil {
		return err
	}
	ns := cfg.Cluster.Namespace
	objects, err := control.NewCache(kc, ns)
	if err != nil {
		return err
	}
	sandboxes, err := replica.New(kc, replica.Config{
		Namespace: ns,
		Cache:     objects,
		Placer:    control.NewPlacer(objects),
		BuiltIn:   slices.Sorted(maps.Keys(template.BuiltIn())),
		Log:       log.With("component", "cluster-api"),
	})
	if err != nil {
		return err
	}
	identity, err := replicaIdentity()
	if err != nil {
		return err
	}
	elector, err := control.NewElector(kc, control.ElectionConfig{
		Namespace: ns, Name: control.LeaderLease, Identity: identity,
		LeaseDuration: control.DefaultLeaseDuration, RenewDeadline: control.DefaultRenewDeadline, RetryPeriod: control.DefaultRetryPeriod,
	}, log.With("component", "leader"))
	if err != nil {
		return err
	}
	lost, err := control.NewLostMarker(kc, objects, control.DefaultLostInterval, log.With("component", "lost"))
	if err != nil {
		return err
	}
	collector, err := control.NewCollector(kc, objects, cfg.Cluster.Retention, control.DefaultCollectInterval, log.With("component", "collector"))
	if err != nil {
		return err
	}
	var ready atomic.Bool
	handler, err := api.New(api.Config{
		Sandboxes:      sandboxes,
		Keys:           keys,
		EnvdVersion:    envd.Version,
		Domain:         cfg.Domain,
		Ready:          ready.Load,
		DefaultTimeout: cfg.DefaultTimeout,
		Log:            log.With("component", "api"),
	})
	if err != nil {
		return fmt.Errorf("setting up the API: %w", err)
	}
	// The nodes route what the replicas forward by the same domain.
	routes, err := router.NewRoutes(cfg.Domain)
	if err != nil {
		return fmt.Errorf("setting up sandbox traffic: %w", err)
	}
	traffic := replica.NewTraffic(routes, sandboxes, log.With("component", "traffic"))
	defer traffic.Close()
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", cfg.Listen, err)
	}
	hs := &http.Server{
		Handler:           traffic.Front(handler),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()

	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { objects.Run(runCtx) })
	wg.Go(func() {
		elector.Run(runCtx, func(ctx context.Context) {
			var chores sync.WaitGroup
			chores.Go(func() { lost.Run(ctx) })
			chores.Go(func() { collector.Run(ctx) })
			chores.Wait()
		})
	})
	defer func() {
		stop()
		wg.Wait() // the elector releases the lead, if it has it
	}()

	if err := objects.WaitSynced(ctx); err != nil {
		hs.Close()
		return err
	}
	ready.Store(true)
	log.Info("API replica ready", "listen", ln.Addr().String(), "namespace", ns, "identity", identity)
	fmt.Fprintf(stdout, "\nagent-sandbox API replica is ready on %s (namespace %s)\n\n", ln.Addr(), ns)

	select {
	case err := <-errc:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutdownCtx); err != nil {
		hs.Close()
	}
	return nil
}

// replicaIdentity names this replica in the leader Lease: the host's name
// (the pod's) and a random suffix, so that a restarted replica is a new
// candidate rather than a leader that never left.
func replicaIdentity() (string, error) {
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("reading the host name: %w", err)
	}
	var b [4]byte
	rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:]), nil
}
