package bench

import (
	"context"
	"fmt"

	"github.com/agent-sandbox/agent-sandbox/client"
)

// ClusterStart starts the cluster the "cluster" figures are measured on:
// API replicas in front of node agents, every node with --warm-pool pool
// ("none": no pool). The bench cannot make a cluster itself, as it makes
// its own servers: one needs an API server and hosts. test/cluster's
// TestBenchCluster (make bench-cluster) starts one on this machine (a
// real kube-apiserver, three node agents on stand-in hosts, a replica).
type ClusterStart func(ctx context.Context, pool string) (*ClusterEndpoint, error)

// ClusterEndpoint is a started cluster.
type ClusterEndpoint struct {
	URL, APIKey string // an API replica's, header routing through it
	Nodes       int
	Stop        func() error
}

// Names of the cluster's figures, each beside the single-host one.
const (
	figClusterPool = "cluster: create→ready, warm pools, serial"
	figClusterCold = "cluster: create→ready, no pool, serial"
	figRate50      = "creates/s, c=50"
)

// measureCluster measures create→ready through an API replica with warm
// pools on the nodes and without, and creates per second at c=50 across
// the nodes (with the pools, as the single host's figure is).
func measureCluster(ctx context.Context, opts *Options) ([]*Figure, error) {
	if opts.Cluster == nil {
		return []*Figure{skipped("cluster figures", "need a cluster the run starts: make bench-cluster (a kube-apiserver, three node agents on stand-in hosts, an API replica)")}, nil
	}
	pooled, err := onCluster(ctx, opts, opts.Pool, func(ep *ClusterEndpoint, c *client.Client) ([]*Figure, error) {
		opts.progress("cluster of %d nodes, --warm-pool %s: serial creates (%d, %v apart so the pools refill)", ep.Nodes, opts.Pool, opts.Samples, opts.Gap)
		s, err := warmSerial(ctx, c, opts.Template, opts.Samples, opts.Gap)
		if err != nil {
			return nil, err
		}
		fc := latencyFigure(figClusterPool, &s.ready)
		fc.Baseline, fc.target = figPoolCreate, p50Times(2, figPoolCreate, "the single host's")
		fc.Note = s.callNote()
		total := opts.scale(200, 50)
		opts.progress("cluster: throughput: %d creates at concurrency 50", total)
		rate, _, err := throughput(ctx, c, opts.Template, 50, total)
		if err != nil {
			return nil, fmt.Errorf("throughput: %w", err)
		}
		fr := &Figure{Name: "cluster: " + figRate50 + fmt.Sprintf(", %d nodes", ep.Nodes), Unit: "/s", Value: rate, N: total, Baseline: figRate50,
			Note: "the nodes share this machine's cores: the ratio is the cluster's overhead, not its capacity"}
		return []*Figure{fc, fr}, nil
	})
	if err != nil {
		return nil, fmt.Errorf("with warm pools: %w", err)
	}
	cold, err := onCluster(ctx, opts, "none", func(ep *ClusterEndpoint, c *client.Client) ([]*Figure, error) {
		opts.progress("cluster of %d nodes without a pool: serial creates (%d)", ep.Nodes, opts.Samples)
		s, err := warmSerial(ctx, c, opts.Template, opts.Samples, 0)
		if err != nil {
			return nil, err
		}
		f := latencyFigure(figClusterCold, &s.ready)
		f.Baseline, f.target = figColdCreate, p50Times(2, figColdCreate, "the single host's")
		f.Note = s.callNote()
		return []*Figure{f}, nil
	})
	if err != nil {
		return nil, fmt.Errorf("without a pool: %w", err)
	}
	return append(pooled, cold...), nil
}

// onCluster runs f against a cluster started with pool, then stops it.
func onCluster(ctx context.Context, opts *Options, pool string, f func(*ClusterEndpoint, *client.Client) ([]*Figure, error)) ([]*Figure, error) {
	ep, err := opts.Cluster(ctx, pool)
	if err != nil {
		return nil, fmt.Errorf("starting the cluster: %w", err)
	}
	return measureAt(ep.URL, ep.APIKey, "the cluster", ep.Stop, func(c *client.Client) ([]*Figure, error) { return f(ep, c) })
}
