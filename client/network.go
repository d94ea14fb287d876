package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// EgressEvent is one egress decision of a sandbox: a DNS query, an answer
// address removed, a proxied connection, or a packet the firewall dropped.
type EgressEvent struct {
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"` // "dns", "dns-answer", "proxy", "firewall"
	Name    string    `json:"name,omitempty"`
	Type    string    `json:"type,omitempty"`  // DNS query type
	Proto   string    `json:"proto,omitempty"` // firewall drops: "tcp", "udp", "icmp", …
	Addrs   []string  `json:"addrs,omitempty"`
	Port    uint16    `json:"port,omitempty"`
	Allowed bool      `json:"allowed"`
	Rule    string    `json:"rule"`
}

// EgressAudit returns up to limit (1–1000; 0 means 1000) of the sandbox's
// egress decisions numbered after `after`, oldest first, and the number to
// pass as after next time (GET /sandboxes/{id}/network/audit, an
// agent-sandbox extension). The server keeps the most recent decisions
// only.
func (c *Client) EgressAudit(ctx context.Context, id string, after uint64, limit int) ([]EgressEvent, uint64, error) {
	q := url.Values{"after": {strconv.FormatUint(after, 10)}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out struct {
		Events []EgressEvent `json:"events"`
		Next   uint64        `json:"next"`
	}
	_, err := c.do(ctx, apiRequest{
		method: http.MethodGet, path: "/sandboxes/" + url.PathEscape(id) + "/network/audit", query: q.Encode(),
		ok: []int{http.StatusOK},
	}, &out)
	if err != nil {
		return nil, 0, fmt.Errorf("reading the egress audit of sandbox %s: %w", id, err)
	}
	return out.Events, out.Next, nil
}

// NetworkRules is a sandbox's whole egress config as PUT
// /sandboxes/{id}/network replaces it: what is left empty is cleared.
type NetworkRules struct {
	AllowOut []string `json:"allowOut,omitempty"`
	DenyOut  []string `json:"denyOut,omitempty"`
	// AllowInternetAccess false denies all egress; nil leaves it allowed.
	AllowInternetAccess *bool `json:"allow_internet_access,omitempty"`
}

// UpdateNetwork replaces the sandbox's egress rules, live.
func (c *Client) UpdateNetwork(ctx context.Context, id string, rules NetworkRules) error {
	_, err := c.do(ctx, apiRequest{
		method: http.MethodPut, path: "/sandboxes/" + url.PathEscape(id) + "/network", body: rules,
		ok: []int{http.StatusNoContent, http.StatusOK},
	}, nil)
	if err != nil {
		return fmt.Errorf("updating the network of sandbox %s: %w", id, err)
	}
	return nil
}
