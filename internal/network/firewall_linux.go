package network

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// TableName is the nftables table (family inet) the firewall owns. Nothing
// else is touched.
const TableName = "agent_sandbox"

const (
	chainPrerouting  = "prerouting"
	chainInput       = "input"
	chainForward     = "forward"
	chainOutput      = "output"
	chainFrom        = "from_sandbox"
	chainPostrouting = "postrouting"
	chainConnsOver   = "conns_over"
	mapSandboxes     = "sandboxes"
	mapConnLimits    = "conn_limits"
	sandboxChain     = "sb-" // + host veth name
	connLimitChain   = "ct-" // + host veth name
)

// The rate of log entries per drop rule: enough for an audit trail of what
// a sandbox tried, too little for a sandbox to flood the reader.
const (
	logRate  = 20 // a second
	logBurst = 50
)

// ctStatusDNAT is IPS_DST_NAT (linux/netfilter/nf_conntrack_common.h):
// the connection's destination was rewritten, here by a Redirect.
const ctStatusDNAT = 1 << 5

// Firewall is the host-side nftables isolation of the sandboxes (see the
// package doc for the layout). Its methods may be called concurrently.
type Firewall struct {
	cfg FirewallConfig
	mu  sync.Mutex // serializes transactions on the table
}

// NewFirewall returns a Firewall with cfg; nothing is installed until
// EnsureBase.
func NewFirewall(cfg FirewallConfig) (*Firewall, error) {
	if cfg.Blocked == nil {
		cfg.Blocked = DefaultBlocked
	}
	for _, p := range cfg.Blocked {
		if !p.IsValid() || !p.Addr().Is4() {
			return nil, fmt.Errorf("firewall: blocked prefix %s is not IPv4", p)
		}
	}
	seen := make(map[Redirect]bool)
	for _, r := range cfg.Redirects {
		if _, ok := l4proto(r.Proto); !ok {
			return nil, fmt.Errorf("firewall: redirect of %s/%d: protocol is not tcp or udp", r.Proto, r.Port)
		}
		if r.Port == 0 || r.ToPort == 0 {
			return nil, fmt.Errorf("firewall: redirect of %s/%d to %d: port 0", r.Proto, r.Port, r.ToPort)
		}
		// A connection already addressed to gateway:ToPort is redirected
		// to itself, which leaves the conntrack DNAT bit unset: the input
		// chain would drop it while accepting the same connection made to
		// any other address.
		if r.Port == r.ToPort {
			return nil, fmt.Errorf("firewall: redirect of %s/%d to itself: the target port must differ", r.Proto, r.Port)
		}
		key := Redirect{Proto: r.Proto, Port: r.Port}
		if seen[key] {
			return nil, fmt.Errorf("firewall: %s/%d redirected twice", r.Proto, r.Port)
		}
		seen[key] = true
	}
	cfg.Redirects = slices.Clone(cfg.Redirects)
	cfg.Blocked = slices.Clone(cfg.Blocked)
	cfg.HostTCPPorts = slices.Clone(cfg.HostTCPPorts)
	cfg.HostUDPPorts = slices.Clone(cfg.HostUDPPorts)
	return &Firewall{cfg: cfg}, nil
}

var table = &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}

func (f *Firewall) sandboxMap() *nftables.Set {
	return &nftables.Set{Table: table, Name: mapSandboxes, IsMap: true, KeyType: nftables.TypeIFName, DataType: nftables.TypeVerdict}
}

func (f *Firewall) connLimitMap() *nftables.Set {
	return &nftables.Set{Table: table, Name: mapConnLimits, IsMap: true, KeyType: nftables.TypeIFName, DataType: nftables.TypeVerdict}
}

// EnsureBase creates the table, or brings an existing one's base chains up
// to the config, in one transaction. The per-sandbox chains and map
// elements of an existing table are kept, so a restarted server keeps the
// pieces of surviving sandboxes.
func (f *Firewall) EnsureBase(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("installing firewall base: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("installing firewall base: %w", err)
	}
	c.AddTable(table)
	accept := nftables.ChainPolicyAccept
	prerouting := c.AddChain(&nftables.Chain{Name: chainPrerouting, Table: table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &accept})
	input := c.AddChain(&nftables.Chain{Name: chainInput, Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	forward := c.AddChain(&nftables.Chain{Name: chainForward, Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	output := c.AddChain(&nftables.Chain{Name: chainOutput, Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	from := c.AddChain(&nftables.Chain{Name: chainFrom, Table: table})
	postrouting := c.AddChain(&nftables.Chain{Name: chainPostrouting, Table: table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource, Policy: &accept})
	connsOver := c.AddChain(&nftables.Chain{Name: chainConnsOver, Table: table})
	vmap, limits := f.sandboxMap(), f.connLimitMap()
	for _, m := range []*nftables.Set{vmap, limits} {
		if err := c.AddSet(m, nil); err != nil {
			return fmt.Errorf("installing firewall base: %w", err)
		}
	}
	for _, ch := range []*nftables.Chain{prerouting, input, forward, output, from, connsOver, postrouting} {
		c.FlushChain(ch)
	}

	rule := func(ch *nftables.Chain, e ...expr.Any) { c.AddRule(&nftables.Rule{Table: table, Chain: ch, Exprs: e}) }
	// drop drops what match matches, logging it first (rate-limited, so
	// in a rule of its own: a limit that is exceeded ends its rule, which
	// must not skip the drop).
	drop := func(ch *nftables.Chain, reason string, match ...[]expr.Any) {
		m := cat(match...)
		if f.cfg.LogGroup != 0 {
			rule(ch, cat(m, logDrop(f.cfg.LogGroup, reason))...)
		}
		rule(ch, cat(m, verdict(expr.VerdictDrop))...)
	}
	fromSandbox := ifPrefix(expr.MetaKeyIIFNAME, expr.CmpOpEq)
	toSandbox := ifPrefix(expr.MetaKeyOIFNAME, expr.CmpOpEq)
	ipv4 := nfproto(unix.NFPROTO_IPV4)

	// prerouting: a sandbox's traffic for a redirected port goes to the
	// gateway, whatever address it was for. Sandboxes have only IPv4.
	for _, r := range f.cfg.Redirects {
		p, _ := l4proto(r.Proto)
		rule(prerouting, cat(ipv4, fromSandbox, dport(p, r.Port), []expr.Any{
			&expr.Immediate{Register: 1, Data: binary.BigEndian.AppendUint16(nil, r.ToPort)},
			&expr.Redir{RegisterProtoMin: 1, Flags: expr.NF_NAT_RANGE_PROTO_SPECIFIED},
		})...)
	}

	// A sandbox's new connections, to the host (DNS and the proxy, which
	// the redirects make local) or through it, first pass its conntrack
	// cap: its ct- chain, one rule (so one count) for both hooks.
	connLimit := cat(fromSandbox, ctNew(), []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Lookup{SourceRegister: 1, SetName: limits.Name, SetID: limits.ID, DestRegister: 0, IsDestRegSet: true},
	})
	rule(input, connLimit...)
	rule(forward, connLimit...)
	drop(connsOver, DropConns)

	// input: replies to the host's own connections; the allowed ports;
	// redirected connections, to their target port only (a DNAT by
	// anything else is not ours to let in); nothing else from a sandbox.
	rule(input, cat(fromSandbox, ctEstablished(), verdict(expr.VerdictAccept))...)
	for _, p := range f.cfg.HostTCPPorts {
		rule(input, cat(fromSandbox, dport(unix.IPPROTO_TCP, p), verdict(expr.VerdictAccept))...)
	}
	for _, p := range f.cfg.HostUDPPorts {
		rule(input, cat(fromSandbox, dport(unix.IPPROTO_UDP, p), verdict(expr.VerdictAccept))...)
	}
	for _, r := range f.cfg.Redirects {
		p, _ := l4proto(r.Proto)
		rule(input, cat(fromSandbox, ctStatus(ctStatusDNAT), dport(p, r.ToPort), verdict(expr.VerdictAccept))...)
	}
	// Both drop; the first only names the reason better.
	drop(input, DropIPv6, fromSandbox, nfproto(unix.NFPROTO_IPV6))
	drop(input, DropHost, fromSandbox)

	// forward: everything from a sandbox goes through from_sandbox;
	// towards a sandbox only replies pass. What else comes in is not a
	// sandbox's doing (and no sandbox's in-interface), so it is not
	// logged.
	rule(forward, cat(fromSandbox, jump(chainFrom))...)
	rule(forward, cat(toSandbox, ctEstablished(), verdict(expr.VerdictAccept))...)
	rule(forward, cat(toSandbox, verdict(expr.VerdictDrop))...)

	// output: what the host itself sends a sandbox is a reply (the DNS
	// filter's answers, the egress proxy's, an ICMP error about a
	// sandbox's own packet) or nothing. The server reaches a sandbox's
	// ports from inside its network namespace, never over the veth, so
	// no host process, of whatever user, opens a connection to one.
	rule(output, cat(toSandbox, ctEstablished(), verdict(expr.VerdictAccept))...)
	rule(output, cat(toSandbox, verdict(expr.VerdictDrop))...)

	// from_sandbox: fixed denials, then the sandbox's own chain, then drop.
	drop(from, DropIPv6, nfproto(unix.NFPROTO_IPV6))
	drop(from, DropSandbox, toSandbox)
	for _, p := range f.cfg.Blocked {
		drop(from, DropBlocked, daddr4(p))
	}
	rule(from,
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Lookup{SourceRegister: 1, SetName: vmap.Name, SetID: vmap.ID, DestRegister: 0, IsDestRegSet: true},
	)
	drop(from, DropDefault)

	// postrouting: what a sandbox may send out leaves with the host's
	// address, since nothing beyond the host routes back to the pool.
	rule(postrouting, cat(ipv4, fromSandbox, ifPrefix(expr.MetaKeyOIFNAME, expr.CmpOpNeq), []expr.Any{&expr.Masq{}})...)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("installing firewall base: %w", err)
	}
	return nil
}

// Delete removes the table and everything in it. Deleting a table that is
// gone succeeds.
func (f *Firewall) Delete(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("deleting firewall: %w", err)
	}
	if ok, err := tableExists(c); err != nil || !ok {
		return err
	}
	c.DelTable(table)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("deleting firewall: %w", err)
	}
	return nil
}

// AddSandbox adds the chain sb-<hostIf>, empty (so the sandbox's forwarded
// traffic is dropped), and maps hostIf to it, in one transaction. Adding a
// sandbox that is there empties its chain.
func (f *Firewall) AddSandbox(ctx context.Context, hostIf string) error {
	return f.setSandbox(ctx, hostIf, nil, true)
}

// SetRules replaces the sandbox's forwarding rules atomically: an accept
// or a drop per rule, in order; what none matches is dropped. The fixed
// denials (other sandboxes, Blocked, IPv6) come first, so these cannot
// open them. The sandbox must have been added.
func (f *Firewall) SetRules(ctx context.Context, hostIf string, rules SandboxRules) error {
	for _, r := range rules {
		if !r.Prefix.IsValid() || !r.Prefix.Addr().Is4() {
			return fmt.Errorf("setting firewall rules of %s: %s is not an IPv4 prefix", hostIf, r.Prefix)
		}
	}
	return f.setSandbox(ctx, hostIf, rules, false)
}

func (f *Firewall) setSandbox(ctx context.Context, hostIf string, rules SandboxRules, create bool) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("setting firewall of %s: %w", hostIf, err)
	}
	if len(hostIf) > 15 || hostIf == "" {
		return fmt.Errorf("setting firewall of %s: invalid interface name", hostIf)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("setting firewall of %s: %w", hostIf, err)
	}
	ch := &nftables.Chain{Name: sandboxChain + hostIf, Table: table}
	if create {
		c.AddChain(ch)
		if err := c.SetAddElements(f.sandboxMap(), []nftables.SetElement{{
			Key:         ifnameKey(hostIf),
			VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: ch.Name},
		}}); err != nil {
			return fmt.Errorf("setting firewall of %s: %w", hostIf, err)
		}
		if err := f.addConnLimit(c, hostIf); err != nil {
			return fmt.Errorf("setting firewall of %s: %w", hostIf, err)
		}
	}
	c.FlushChain(ch)
	for _, r := range rules {
		if r.Accept {
			c.AddRule(&nftables.Rule{Table: table, Chain: ch, Exprs: cat(daddr4(r.Prefix), verdict(expr.VerdictAccept))})
			continue
		}
		if f.cfg.LogGroup != 0 {
			c.AddRule(&nftables.Rule{Table: table, Chain: ch, Exprs: cat(daddr4(r.Prefix), logDrop(f.cfg.LogGroup, DropDenied))})
		}
		c.AddRule(&nftables.Rule{Table: table, Chain: ch, Exprs: cat(daddr4(r.Prefix), verdict(expr.VerdictDrop))})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("setting firewall of %s: %w", hostIf, err)
	}
	return nil
}

// addConnLimit adds hostIf's ct- chain, which sends a new connection
// beyond MaxConnsPerSandbox to conns_over, and maps hostIf to it. The
// chain is never rewritten while the sandbox lives: a new rule would
// start counting from zero.
func (f *Firewall) addConnLimit(c *nftables.Conn, hostIf string) error {
	if f.cfg.MaxConnsPerSandbox == 0 {
		return nil
	}
	ch := c.AddChain(&nftables.Chain{Name: connLimitChain + hostIf, Table: table})
	c.FlushChain(ch)
	c.AddRule(&nftables.Rule{Table: table, Chain: ch, Exprs: []expr.Any{
		// "ct count over N": the expression matches when the count of
		// its connections (this one added) is above N.
		&expr.Connlimit{Count: f.cfg.MaxConnsPerSandbox, Flags: expr.NFT_CONNLIMIT_F_INV},
		&expr.Verdict{Kind: expr.VerdictJump, Chain: chainConnsOver},
	}})
	return c.SetAddElements(f.connLimitMap(), []nftables.SetElement{{
		Key:         ifnameKey(hostIf),
		VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: ch.Name},
	}})
}

// RemoveSandbox removes hostIf's map element and chain in one transaction.
// Removing a sandbox that is not there succeeds.
func (f *Firewall) RemoveSandbox(ctx context.Context, hostIf string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("removing firewall of %s: %w", hostIf, err)
	}
	if ok, err := tableExists(c); err != nil || !ok {
		return err
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return fmt.Errorf("removing firewall of %s: listing chains: %w", hostIf, err)
	}
	key := ifnameKey(hostIf)
	for _, p := range []struct {
		chain string
		m     *nftables.Set
	}{{sandboxChain + hostIf, f.sandboxMap()}, {connLimitChain + hostIf, f.connLimitMap()}} {
		if !slices.ContainsFunc(chains, func(ch *nftables.Chain) bool { return ch.Table.Name == TableName && ch.Name == p.chain }) {
			continue
		}
		elems, err := c.GetSetElements(p.m)
		if err != nil {
			return fmt.Errorf("removing firewall of %s: listing %s: %w", hostIf, p.m.Name, err)
		}
		for _, e := range elems {
			if string(e.Key) == string(key) {
				if err := c.SetDeleteElements(p.m, []nftables.SetElement{{Key: key}}); err != nil {
					return fmt.Errorf("removing firewall of %s: %w", hostIf, err)
				}
			}
		}
		ch := &nftables.Chain{Name: p.chain, Table: table}
		c.FlushChain(ch)
		c.DelChain(ch)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("removing firewall of %s: %w", hostIf, err)
	}
	return nil
}

// FirewallChains reports whether the firewall's table exists and the names
// of its chains, for diagnostics and for tests that check what is left.
func FirewallChains() (exists bool, chains []string, err error) {
	c, err := nftables.New()
	if err != nil {
		return false, nil, fmt.Errorf("opening netlink for nftables: %w", err)
	}
	if exists, err = tableExists(c); err != nil || !exists {
		return exists, nil, err
	}
	all, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return true, nil, fmt.Errorf("listing chains of %s: %w", TableName, err)
	}
	for _, ch := range all {
		if ch.Table.Name == TableName {
			chains = append(chains, ch.Name)
		}
	}
	return true, chains, nil
}

func tableExists(c *nftables.Conn) (bool, error) {
	_, err := c.ListTableOfFamily(TableName, nftables.TableFamilyINet)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	return false, fmt.Errorf("looking up table %s: %w", TableName, err)
}

func cat(parts ...[]expr.Any) []expr.Any { return slices.Concat(parts...) }

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }

func jump(chain string) []expr.Any {
	return []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: chain}}
}

// ifPrefix matches an interface name starting (op CmpOpEq) or not
// starting (CmpOpNeq) with HostNamePrefix (nft's iifname "asb-*": a
// comparison of the prefix's bytes only).
func ifPrefix(key expr.MetaKey, op expr.CmpOp) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: op, Register: 1, Data: []byte(HostNamePrefix)},
	}
}

// l4proto is the IP protocol number of a Redirect's Proto.
func l4proto(name string) (uint8, bool) {
	switch name {
	case "tcp":
		return unix.IPPROTO_TCP, true
	case "udp":
		return unix.IPPROTO_UDP, true
	}
	return 0, false
}

// logDrop logs to the NFLOG group with reason as the prefix, at most
// logRate packets a second (bursts of logBurst) per rule it is in.
func logDrop(group uint16, reason string) []expr.Any {
	return []expr.Any{
		&expr.Limit{Type: expr.LimitTypePkts, Rate: logRate, Unit: expr.LimitTimeSecond, Burst: logBurst},
		&expr.Log{Key: 1<<unix.NFTA_LOG_GROUP | 1<<unix.NFTA_LOG_PREFIX, Group: group, Data: []byte(reason)},
	}
}

// ctStatus matches connections with any of the conntrack status bits.
func ctStatus(bits uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(bits),
			Xor:  binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
	}
}

func ifnameKey(name string) []byte {
	b := make([]byte, 16)
	copy(b, name)
	return b
}

func ctEstablished() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED),
			Xor:  binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
	}
}

// ctNew matches a connection's first packet.
func ctNew() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitNEW),
			Xor:  binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
	}
}

func nfproto(p uint8) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}

func dport(proto uint8, port uint16) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, port)},
	}
}

// daddr4 matches IPv4 packets whose destination lies in p.
func daddr4(p netip.Prefix) []expr.Any {
	p = p.Masked()
	mask := net4Mask(p.Bits())
	net := p.Addr().As4()
	return cat(nfproto(unix.NFPROTO_IPV4), []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: net[:]},
	})
}

func net4Mask(bits int) []byte {
	var m uint32
	if bits > 0 {
		m = ^uint32(0) << (32 - bits)
	}
	return binary.BigEndian.AppendUint32(nil, m)
}
