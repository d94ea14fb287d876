package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agent-sandbox/agent-sandbox/internal/egress"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// Network enforces sandboxes' egress policies on the host (gateway.Gateway).
type Network interface {
	Attach(ctx context.Context, id string, link network.Link, rules egress.Rules, bw network.Bandwidth) error
	Update(ctx context.Context, id string, rules egress.Rules) error
	Detach(id string)
	Events(id string, cursor uint64, limit int) ([]egress.Event, uint64, error)
}

// NetworkUpdate is PUT /sandboxes/{id}/network after the API decoded it. It
// replaces the whole egress config: what is absent is cleared.
type NetworkUpdate struct {
	AllowOut            []string
	DenyOut             []string
	AllowInternetAccess *bool
}

// egressConfig is what a sandbox's record says about its egress: the E2B
// fields, and our bandwidth extension network.bandwidth.
type egressConfig struct {
	rules egress.Rules
	bw    network.Bandwidth
}

// bandwidthField is network.bandwidth: caps in Mbit/s, each at most the
// server's MaxBandwidth; absent or 0 means the server's.
type bandwidthField struct {
	DownMbit float64 `json:"downMbit"`
	UpMbit   float64 `json:"upMbit"`
}

// unsupportedNetworkFields are E2B network fields this server cannot
// honour; a request that sets one is refused rather than half-obeyed.
var unsupportedNetworkFields = map[string]string{
	"rules":       "network.rules (egress header injection) is not supported by this server",
	"egressProxy": "network.egressProxy (a SOCKS5 egress proxy) is not supported by this server",
}

// parseEgress reads and checks the egress side of a network config for a
// sandbox of tmpl (nil: unknown), whose bandwidth is the default.
func (m *Manager) parseEgress(raw json.RawMessage, allowInternet *bool, tmpl *template.Template) (egressConfig, error) {
	rules, err := egress.ParseRules(raw, allowInternet)
	if err != nil {
		return egressConfig{}, invalid("%v", err)
	}
	var n struct {
		Bandwidth *bandwidthField `json:"bandwidth"`
	}
	var fields map[string]json.RawMessage
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &fields); err != nil {
			return egressConfig{}, invalid("network: %v", err)
		}
		if err := json.Unmarshal(raw, &n); err != nil {
			return egressConfig{}, invalid("network.bandwidth: %v", err)
		}
	}
	for field, msg := range unsupportedNetworkFields {
		if v, ok := fields[field]; ok && !emptyJSON(v) {
			return egressConfig{}, invalid("%s", msg)
		}
	}
	// The server's limit, lowered by the template's default, lowered or
	// kept by the request.
	max := m.cfg.MaxBandwidth
	def := max
	if tmpl != nil && tmpl.Spec.BandwidthMbit > 0 {
		t := uint64(tmpl.Spec.BandwidthMbit * 1e6)
		def = network.Bandwidth{Down: lower(max.Down, t), Up: lower(max.Up, t)}
	}
	var req bandwidthField
	if n.Bandwidth != nil {
		req = *n.Bandwidth
	}
	down, err := bandwidth("downMbit", req.DownMbit, def.Down, max.Down)
	if err != nil {
		return egressConfig{}, err
	}
	up, err := bandwidth("upMbit", req.UpMbit, def.Up, max.Up)
	if err != nil {
		return egressConfig{}, err
	}
	return egressConfig{rules: rules, bw: network.Bandwidth{Down: down, Up: up}}, nil
}

// bandwidth turns a requested cap in Mbit/s into bit/s: def when 0, at
// most max (bit/s; 0 means unlimited for both).
func bandwidth(field string, mbit float64, def, max uint64) (uint64, error) {
	switch {
	case mbit == 0:
		return def, nil
	case mbit < 0.1:
		return 0, invalid("network.bandwidth.%s must be at least 0.1", field)
	}
	bps := uint64(mbit * 1e6)
	if max != 0 && bps > max {
		return 0, invalid("network.bandwidth.%s cannot be greater than %g (the server's limit)", field, float64(max)/1e6)
	}
	return bps, nil
}

// lower returns the smaller cap, where 0 is unlimited.
func lower(a, b uint64) uint64 {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

// emptyJSON reports whether v is null, {} or [].
func emptyJSON(v json.RawMessage) bool {
	switch string(bytes.Join(bytes.Fields(v), nil)) {
	case "null", "{}", "[]":
		return true
	}
	return false
}

// attachNetwork gives a started sandbox of tmpl its egress enforcement. It
// does nothing when the backend gave the sandbox no link. A nil tmpl (an
// adopted sandbox) is looked up; one removed since is no reason to lose
// the sandbox: its bandwidth falls back to the server's.
func (m *Manager) attachNetwork(ctx context.Context, rec store.Sandbox, inst isolation.Instance, tmpl *template.Template) error {
	link := inst.Link()
	if m.cfg.Network == nil || !link.Gateway.IsValid() {
		return nil
	}
	if tmpl == nil {
		tmpl, _ = m.cfg.Templates.Lookup(rec.TemplateID)
	}
	ec, err := m.parseEgress(rec.Network, rec.AllowInternetAccess, tmpl)
	if err != nil {
		return err
	}
	return m.cfg.Network.Attach(ctx, rec.ID, link, ec.rules, ec.bw)
}

// detachNetwork undoes attachNetwork.
func (m *Manager) detachNetwork(id string) {
	if m.cfg.Network != nil {
		m.cfg.Network.Detach(id)
	}
}

// UpdateNetwork replaces a running or paused sandbox's egress rules (PUT
// /sandboxes/{id}/network). The record is written first, so a restarted
// server applies the new rules too.
func (m *Manager) UpdateNetwork(ctx context.Context, id string, u NetworkUpdate) error {
	sb, err := m.lockLive(id)
	if err != nil {
		return err
	}
	defer sb.op.Unlock()
	lists, err := json.Marshal(struct {
		AllowOut []string `json:"allowOut,omitempty"`
		DenyOut  []string `json:"denyOut,omitempty"`
	}{u.AllowOut, u.DenyOut})
	if err != nil {
		return err
	}
	rules, err := egress.ParseRules(lists, u.AllowInternetAccess)
	if err != nil {
		return invalid("%v", err)
	}
	_, err = m.cfg.Store.UpdateSandbox(ctx, id, func(rec *store.Sandbox) error {
		merged, err := replaceEgressLists(rec.Network, u)
		if err != nil {
			return err
		}
		rec.Network = merged
		rec.AllowInternetAccess = u.AllowInternetAccess
		return nil
	})
	if err != nil {
		return fmt.Errorf("updating the network of sandbox %s: recording: %w", id, err)
	}
	if m.cfg.Network == nil || !sb.instance().Link().Gateway.IsValid() {
		return nil
	}
	if err := m.cfg.Network.Update(ctx, id, rules); err != nil {
		return fmt.Errorf("updating the network of sandbox %s: %w", id, err)
	}
	return nil
}

// replaceEgressLists returns the stored network config with allowOut and
// denyOut replaced by u's, every other field kept.
func replaceEgressLists(raw json.RawMessage, u NetworkUpdate) (json.RawMessage, error) {
	fields := map[string]json.RawMessage{}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &fields); err != nil {
			return nil, fmt.Errorf("reading the stored network config: %w", err)
		}
	}
	for key, list := range map[string][]string{"allowOut": u.AllowOut, "denyOut": u.DenyOut} {
		delete(fields, key)
		if len(list) > 0 {
			b, err := json.Marshal(list)
			if err != nil {
				return nil, err
			}
			fields[key] = b
		}
	}
	if len(fields) == 0 {
		return nil, nil
	}
	return json.Marshal(fields)
}

// ErrNoAudit is returned (wrapped) by EgressEvents when this server does
// not enforce egress (no sandbox networking).
var ErrNoAudit = errors.New("egress audit is not available: sandbox networking is off")

// EgressEvents returns a live sandbox's egress decisions after cursor (our
// extension: GET /sandboxes/{id}/network/audit).
func (m *Manager) EgressEvents(id string, cursor uint64, limit int) ([]egress.Event, uint64, error) {
	sb, err := m.lookup(id)
	if err != nil {
		return nil, 0, err
	}
	if m.cfg.Network == nil || !sb.instance().Link().Gateway.IsValid() {
		return nil, 0, ErrNoAudit
	}
	return m.cfg.Network.Events(id, cursor, limit)
}
