package server

import (
	"strings"
	"testing"
	"time"
)

func TestClusterConfigValidate(t *testing.T) {
	node := func(c ClusterConfig) ClusterConfig {
		c.Mode = ClusterKubernetes
		if c.Namespace == "" {
			c.Namespace = "agent-sandbox"
		}
		if c.APIQPS == 0 {
			c.APIQPS, c.APIBurst = 200, 400
		}
		return c
	}
	for _, tc := range []struct {
		name        string
		cfg         ClusterConfig
		listen      string
		wantAddress string
		wantErr     string // in the error; "" = none
	}{
		{name: "a host on its own", listen: ":3000"},
		{name: "another mode", cfg: ClusterConfig{Mode: "nomad"}, listen: ":3000", wantErr: "--cluster"},
		{name: "the address from --listen", cfg: node(ClusterConfig{NodeName: "n1"}), listen: "10.1.2.3:3000", wantAddress: "10.1.2.3:3000"},
		{name: "an explicit address", cfg: node(ClusterConfig{NodeName: "n1", NodeAddress: "n1.internal:3000"}), listen: ":3000", wantAddress: "n1.internal:3000"},
		{name: "no host to reach", cfg: node(ClusterConfig{NodeName: "n1"}), listen: ":3000", wantErr: "--node-address"},
		{name: "an unspecified host", cfg: node(ClusterConfig{NodeName: "n1"}), listen: "0.0.0.0:3000", wantErr: "--node-address"},
		{name: "an address without port", cfg: node(ClusterConfig{NodeName: "n1", NodeAddress: "n1.internal"}), listen: ":3000", wantErr: "--node-address"},
		{name: "no node name", cfg: node(ClusterConfig{}), listen: "10.1.2.3:3000", wantErr: "--node-name"},
		{name: "no namespace", cfg: ClusterConfig{Mode: ClusterKubernetes, NodeName: "n1"}, listen: "10.1.2.3:3000", wantErr: "--cluster-namespace"},
		{name: "an API replica needs no node name or address", cfg: node(ClusterConfig{Role: RoleAPI, Retention: time.Hour}), listen: ":3000"},
		{name: "an API replica that keeps nothing ended", cfg: node(ClusterConfig{Role: RoleAPI}), listen: ":3000", wantErr: "--ended-retention"},
		{name: "another role", cfg: node(ClusterConfig{Role: "scheduler", NodeName: "n1"}), listen: "10.1.2.3:3000", wantErr: "--role"},
		{name: "no request rate", cfg: node(ClusterConfig{NodeName: "n1", APIQPS: -1}), listen: "10.1.2.3:3000", wantAddress: "10.1.2.3:3000"},
		{name: "a request rate of 0", cfg: ClusterConfig{Mode: ClusterKubernetes, Namespace: "agent-sandbox", NodeName: "n1", APIBurst: 10}, listen: "10.1.2.3:3000", wantErr: "--kube-api-qps"},
		{name: "a request rate without a burst", cfg: node(ClusterConfig{NodeName: "n1", APIQPS: 50}), listen: "10.1.2.3:3000", wantErr: "--kube-api-burst"},
		{name: "a role without a cluster", cfg: ClusterConfig{Role: RoleAPI}, listen: ":3000", wantErr: "--role"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cfg
			err := c.validate(tc.listen)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("validate: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("validate: %v, want an error naming %s", err, tc.wantErr)
			}
			if err == nil && c.NodeAddress != tc.wantAddress {
				t.Errorf("node address %q, want %q", c.NodeAddress, tc.wantAddress)
			}
		})
	}
}
