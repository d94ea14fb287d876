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
	// EgressCA is the certificate (PEM) of the CA an attached sandbox's
	// egress proxy terminates TLS with to apply header rules.
	EgressCA(id string) ([]byte, error)
}

// NetworkUpdate is PUT /sandboxes/{id}/network after the API decoded it. It
// replaces the whole egress config: what is absent is cleared.
type NetworkUpdate struct {
	AllowOut            []string
	DenyOut             []string
	AllowInternetAccess *bool
	// Rules is network.rules as sent (egress header rules).
	Rules json.RawMessage
}

// egressConfig is what a sandbox's record says about its egress: the E2B
// fields, and our bandwidth extension network.bandwidth.
type egressConfig struct {
	rules egress.Rules
	bw    network.Bandwidth
	// network is the config as it is stored: rules' domains in lower
	// case, as E2B stores them.
	network json.RawMessage
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
	"egressProxy": "network.egressProxy (a SOCKS5 egress proxy) is not supported by this server",
}

// parseEgress reads and checks the egress side of a network config for a
// sandbox of tmpl (nil: unknown), whose bandwidth is the default.
func (m *Manager) parseEgress(raw json.RawMessage, allowInternet *bool, tmpl *template.Template) (egressConfig, error) {
	rules, err := m.parseRules(raw, allowInternet)
	if err != nil {
		return egressConfig{}, err
	}
	stored, err := setNetworkFields(raw, map[string]json.RawMessage{"rules": rules.RulesJSON()})
	if err != nil {
		return egressConfig{}, invalid("network: %v", err)
	}
	if err := checkNetworkFields(raw); err != nil {
		return egressConfig{}, err
	}
	var n struct {
		Bandwidth *bandwidthField `json:"bandwidth"`
	}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &n); err != nil {
			return egressConfig{}, invalid("network.bandwidth: %v", err)
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
	return egressConfig{rules: rules, bw: network.Bandwidth{Down: down, Up: up}, network: stored}, nil
}

// parseRules is egress.ParseRules for this server: header rules need the
// egress proxy, which a server without sandbox networking does not run.
func (m *Manager) parseRules(raw json.RawMessage, allowInternet *bool) (egress.Rules, error) {
	rules, err := egress.ParseRules(raw, allowInternet)
	if err != nil {
		return egress.Rules{}, invalid("%v", err)
	}
	if rules.HasHeaderRules() && m.cfg.Network == nil {
		return egress.Rules{}, invalid("network.rules needs the egress proxy, and this server runs sandboxes without networking")
	}
	return rules, nil
}

// checkNetworkFields refuses a network config (JSON) that is not an
// object, or that sets a field this server cannot honour.
func checkNetworkFields(raw json.RawMessage) error {
	if len(raw) == 0 {
		return nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return invalid("network: %v", err)
	}
	for field, msg := range unsupportedNetworkFields {
		if v, ok := fields[field]; ok && !emptyJSON(v) {
			return invalid("%s", msg)
		}
	}
	return nil
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
	egressFields, err := json.Marshal(struct {
		AllowOut []string        `json:"allowOut,omitempty"`
		DenyOut  []string        `json:"denyOut,omitempty"`
		Rules    json.RawMessage `json:"rules,omitempty"`
	}{u.AllowOut, u.DenyOut, u.Rules})
	if err != nil {
		return invalid("network: %v", err)
	}
	rules, err := m.parseRules(egressFields, u.AllowInternetAccess)
	if err != nil {
		return err
	}
	_, err = m.cfg.Store.UpdateSandbox(ctx, id, func(rec *store.Sandbox) error {
		merged, err := replaceEgress(rec.Network, u, rules)
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

// replaceEgress returns the stored network config with allowOut, denyOut
// and rules replaced by u's (rules as parsed), every other field kept.
func replaceEgress(raw json.RawMessage, u NetworkUpdate, rules egress.Rules) (json.RawMessage, error) {
	fields := map[string]json.RawMessage{"rules": rules.RulesJSON()}
	for key, list := range map[string][]string{"allowOut": u.AllowOut, "denyOut": u.DenyOut} {
		fields[key] = nil
		if len(list) > 0 {
			b, err := json.Marshal(list)
			if err != nil {
				return nil, err
			}
			fields[key] = b
		}
	}
	merged, err := setNetworkFields(raw, fields)
	if err != nil {
		return nil, fmt.Errorf("reading the stored network config: %w", err)
	}
	return merged, nil
}

// setNetworkFields returns the network config raw (an object, or empty)
// with fields set, or removed where their value is nil; nil when nothing
// is left. raw comes back as it is when there is nothing to change.
func setNetworkFields(raw json.RawMessage, fields map[string]json.RawMessage) (json.RawMessage, error) {
	obj := map[string]json.RawMessage{}
	if len(raw) > 0 && !emptyJSON(raw) {
		if err := json.Unmarshal(raw, &obj); err != nil {
			return nil, err
		}
	}
	changed := false
	for key, v := range fields {
		old, had := obj[key]
		switch {
		case v == nil && had:
			delete(obj, key)
			changed = true
		case v != nil && !bytes.Equal(old, v):
			obj[key] = v
			changed = true
		}
	}
	switch {
	case !changed:
		return raw, nil
	case len(obj) == 0:
		return nil, nil
	}
	return json.Marshal(obj)
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
