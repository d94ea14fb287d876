package server

import (
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agent-sandbox/agent-sandbox/internal/cluster/node"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/v1alpha1"
)

// ClusterKubernetes in ClusterConfig.Mode makes the server a node agent of
// a Kubernetes cluster (docs/KUBERNETES.md).
const ClusterKubernetes = "kubernetes"

// The roles of a server in cluster mode: a node agent runs sandboxes; an
// API replica serves the E2B API over the cluster's objects.
const (
	RoleNode = "node"
	RoleAPI  = "api"
)

// ClusterConfig is cluster mode's part of Config.
type ClusterConfig struct {
	// Mode is "" (a host on its own) or ClusterKubernetes.
	Mode string
	// Role is RoleNode ("" too) or RoleAPI.
	Role string
	// Kubeconfig is the file to reach the API server with; "" = the pod's
	// service account (in-cluster).
	Kubeconfig string
	// Namespace holds the node's Lease and SandboxNode.
	Namespace string
	// NodeName names this node: its Lease and SandboxNode.
	NodeName string
	// NodeAddress is where API replicas reach this node; "" = Listen,
	// which then needs a host.
	NodeAddress string
	// Retention is how long an API replica's leader keeps a Sandbox
	// object that ended before it deletes it (control.DefaultRetention).
	Retention time.Duration
	// APIQPS and APIBurst bound this process's requests to the API
	// server (client-go's token bucket, which is 5/s, bursts of 10,
	// unset: a cluster's creates are several writes each); APIQPS < 0:
	// no bound, the API server's priority and fairness alone.
	APIQPS   float64
	APIBurst int
}

// validate checks the cluster flags against the listen address.
func (c *ClusterConfig) validate(listen string) error {
	switch c.Mode {
	case "":
		if c.Role != "" && c.Role != RoleNode {
			return fmt.Errorf("--role %s: only with --cluster kubernetes", c.Role)
		}
		return nil
	case ClusterKubernetes:
	default:
		return fmt.Errorf("--cluster %q: want kubernetes, or none for a host on its own", c.Mode)
	}
	if c.Namespace == "" {
		return fmt.Errorf("--cluster-namespace is empty: name the namespace of the cluster's objects (in a pod: $POD_NAMESPACE)")
	}
	if c.APIQPS == 0 || (c.APIQPS > 0 && c.APIBurst < 1) {
		return fmt.Errorf("--kube-api-qps %g --kube-api-burst %d: want a rate above 0 and a burst of at least 1, or a negative rate for no bound", c.APIQPS, c.APIBurst)
	}
	switch c.Role {
	case RoleAPI:
		if c.Retention <= 0 {
			return fmt.Errorf("--ended-retention %s: want more than 0", c.Retention)
		}
		return nil
	case "", RoleNode:
	default:
		return fmt.Errorf("--role %q: want node or api", c.Role)
	}
	if c.NodeName == "" {
		return fmt.Errorf("--node-name is empty: name this node (in a pod: $NODE_NAME, from spec.nodeName)")
	}
	if c.NodeAddress == "" {
		host, _, err := net.SplitHostPort(listen)
		if err != nil || host == "" || net.ParseIP(host).IsUnspecified() {
			return fmt.Errorf("--node-address is empty and --listen %q has no host to reach this node at: give one of them a routable address", listen)
		}
		c.NodeAddress = listen
	}
	if _, _, err := net.SplitHostPort(c.NodeAddress); err != nil {
		return fmt.Errorf("--node-address %q: want host:port: %w", c.NodeAddress, err)
	}
	return nil
}

// kubeConfig is the API server's client config: from the kubeconfig file,
// or the pod's service account; with the request bounds.
func (c ClusterConfig) kubeConfig() (*rest.Config, error) {
	var kc *rest.Config
	var err error
	if c.Kubeconfig != "" {
		if kc, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
			return nil, fmt.Errorf("reading --kubeconfig %s: %w", c.Kubeconfig, err)
		}
	} else if kc, err = rest.InClusterConfig(); err != nil {
		return nil, fmt.Errorf("reaching the API server from the pod (or give --kubeconfig): %w", err)
	}
	kc.QPS, kc.Burst = float32(c.APIQPS), c.APIBurst
	return kc, nil
}

// newNodeAgent is the node agent of a server in cluster mode, nil outside
// it. It publishes the server's sandbox cap, the host's CPUs and memory,
// the sandboxes live and the templates built, and runs the sandboxes
// placed on the node through the server's manager.
func (s *Server) newNodeAgent(log *slog.Logger) (*node.Agent, error) {
	c := s.cfg.Cluster
	if c.Mode == "" {
		return nil, nil
	}
	kc, err := c.kubeConfig()
	if err != nil {
		return nil, err
	}
	mem, err := hostMemoryMB("/proc/meminfo")
	if err != nil {
		return nil, err
	}
	return node.New(kc, node.Config{
		Namespace: c.Namespace,
		Name:      c.NodeName,
		Address:   c.NodeAddress,
		Capacity: v1alpha1.NodeCapacity{
			Sandboxes: int32(s.cfg.MaxSandboxes),
			CPUs:      int32(runtime.NumCPU()),
			MemoryMiB: int64(mem),
		},
		Usage:         s.nodeUsage,
		UsageChanged:  s.manager.PoolsChanged(),
		LeaseDuration: node.DefaultLeaseDuration,
		RenewInterval: node.DefaultRenewInterval,
		Local:         clusterSandboxes{manager: s.manager, store: s.store},
		CheckInterval: node.DefaultCheckInterval,
	}, log)
}

// nodeUsage is what the node agent publishes as held.
func (s *Server) nodeUsage() node.Usage {
	u := node.Usage{Sandboxes: int32(s.manager.Count())}
	templates, err := s.templates.List()
	if err != nil {
		s.log.Warn("listing templates for the node's status", "err", err)
	}
	for _, t := range templates {
		u.Templates = append(u.Templates, t.Name)
	}
	u.Templates = slices.Compact(u.Templates) // List sorts by name
	for name, p := range s.manager.Pools() {
		if len(p.IDs) > 0 {
			if u.Warm == nil {
				u.Warm = make(map[string][]string)
			}
			u.Warm[name] = p.IDs
		}
	}
	return u
}
