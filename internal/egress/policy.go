package egress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// DefaultAllowDomains is the domain allowlist of the default Ceiling: the
// package registries a sandbox commonly needs, and nothing else. Each entry
// says what needs it.
var DefaultAllowDomains = []string{
	// Python: the index and the CDN the wheels and sdists are served from.
	"pypi.org",
	"files.pythonhosted.org",
	// JavaScript: npm registry (metadata and tarballs) and the yarn mirror of it.
	"registry.npmjs.org",
	"registry.yarnpkg.com",
	// Debian and Ubuntu archives for apt.
	"deb.debian.org",
	"security.debian.org",
	"archive.ubuntu.com",
	"security.ubuntu.com",
	// Alpine packages.
	"dl-cdn.alpinelinux.org",
	// GitHub: git over HTTPS, archives, release assets and raw files.
	"github.com",
	"codeload.github.com",
	"*.githubusercontent.com",
	// Go: module proxy and checksum database.
	"proxy.golang.org",
	"sum.golang.org",
	// Rust: crates.io API, sparse index and crate downloads.
	"crates.io",
	"static.crates.io",
	"index.crates.io",
	// Ruby gems.
	"rubygems.org",
	"index.rubygems.org",
	// Java: Maven Central.
	"repo.maven.apache.org",
	"repo1.maven.org",
}

// Ceiling is the operator's egress policy, part of the server config. It
// bounds what any sandbox may reach; see the package doc for how it combines
// with a sandbox's Rules. Lists hold the same entry syntax as the E2B
// fields: domains (optionally with a leading "*.") or CIDRs/IPs.
type Ceiling struct {
	// Open lets sandboxes reach any public IPv4 address and any name not
	// denied. When false (the default) only AllowDomains and AllowCIDRs are
	// reachable, plus sandbox allowOut entries if SandboxMayWiden is set.
	Open bool `json:"open"`
	// SandboxMayWiden lets a sandbox's allowOut add domains and public CIDRs
	// beyond AllowDomains/AllowCIDRs in allowlist mode. (In open mode they
	// add only IPv6 ranges, everything else public being open already.)
	SandboxMayWiden bool `json:"sandboxMayWiden"`
	// AllowDomains are reachable by every sandbox that does not deny them.
	AllowDomains []string `json:"allowDomains"`
	// AllowCIDRs are reachable by address by every sandbox that does not deny
	// them. A CIDR that lies inside a private or reserved range is the only
	// way to open (that part of) such a range.
	AllowCIDRs []string `json:"allowCIDRs"`
	// DenyDomains and DenyCIDRs are unreachable whatever a sandbox says.
	DenyDomains []string `json:"denyDomains"`
	DenyCIDRs   []string `json:"denyCIDRs"`
	// ReservedCIDRs are the host's own addresses and the sandbox address
	// pools: treated like the built-in private ranges.
	ReservedCIDRs []string `json:"reservedCIDRs"`
}

// DefaultCeiling returns the secure default: deny all except
// DefaultAllowDomains, no CIDRs, no widening by sandboxes.
func DefaultCeiling() Ceiling {
	return Ceiling{AllowDomains: append([]string(nil), DefaultAllowDomains...)}
}

// Validate reports every malformed entry of c.
func (c Ceiling) Validate() error {
	_, err := compileCeiling(c)
	return err
}

// EntryError is a malformed policy entry. Its message is meant for the user
// who wrote the entry.
type EntryError struct {
	Field  string // e.g. "network.allowOut"
	Index  int
	Entry  string
	Reason string
}

func (e *EntryError) Error() string {
	return fmt.Sprintf("%s[%d] %q: %s", e.Field, e.Index, e.Entry, e.Reason)
}

// maxEntries bounds each list of a sandbox's rules.
const maxEntries = 1000

// entry is one parsed rule: an address prefix or a name pattern.
type entry struct {
	text   string // as written, for the audit trail
	prefix netip.Prefix
	name   namePattern
	isName bool
}

// Kinds of entries a list accepts.
type entryKind int

const (
	anyEntry entryKind = iota
	nameEntry
	addrEntry
)

// parseEntry parses a CIDR, an IP or a domain pattern, as kind permits. A
// CIDR with host bits set is accepted and masked ("10.1.2.3/8" is
// 10.0.0.0/8).
func parseEntry(s string, kind entryKind) (entry, error) {
	e, err := parseAnyEntry(s, kind != addrEntry)
	if err == nil && kind == nameEntry && !e.isName {
		return entry{}, errors.New("an address: put it in a CIDR list")
	}
	return e, err
}

func parseAnyEntry(s string, allowNames bool) (entry, error) {
	switch {
	case s == "":
		return entry{}, errors.New("empty entry")
	case strings.TrimSpace(s) != s:
		return entry{}, errors.New("leading or trailing space")
	case strings.Contains(s, "/"):
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return entry{}, fmt.Errorf("invalid CIDR: %v", err)
		}
		if p.Addr().Is4In6() {
			return entry{}, errors.New("IPv4-mapped IPv6 CIDR: write the IPv4 CIDR")
		}
		return entry{text: s, prefix: p.Masked()}, nil
	case strings.Contains(s, ":") || isIPv4Like(s):
		a, err := netip.ParseAddr(s)
		if err != nil {
			return entry{}, fmt.Errorf("invalid IP address: %v", err)
		}
		if a.Zone() != "" {
			return entry{}, errors.New("IP address with a zone")
		}
		a = a.Unmap()
		return entry{text: s, prefix: netip.PrefixFrom(a, a.BitLen())}, nil
	}
	if !allowNames {
		return entry{}, errors.New("not a CIDR or IP address")
	}
	p, err := parseNamePattern(s)
	if err != nil {
		return entry{}, fmt.Errorf("invalid domain: %v", err)
	}
	return entry{text: s, name: p, isName: true}, nil
}

// isIPv4Like reports whether s is made only of digits and dots, so that a
// bad IPv4 address ("1.2.3.999") is reported as such rather than as a name.
func isIPv4Like(s string) bool {
	return strings.Trim(s, "0123456789.") == "" && strings.Contains(s, ".")
}

// Rules is a sandbox's own egress rules, from the E2B create request or
// PUT /sandboxes/{id}/network. The zero Rules allows what the ceiling allows.
type Rules struct {
	// InternetOff is allow_internet_access: false.
	InternetOff bool
	allowOut    []entry
	denyOut     []entry
	headers     headerRules // network.rules
}

// AllowOut and DenyOut return the entries as written, for echoing back.
func (r Rules) AllowOut() []string { return entryTexts(r.allowOut) }

// DenyOut returns the denyOut entries as written.
func (r Rules) DenyOut() []string { return entryTexts(r.denyOut) }

func entryTexts(es []entry) []string {
	if len(es) == 0 {
		return nil
	}
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.text
	}
	return out
}

// ParseRules builds Rules from the E2B `network` object (raw may be empty or
// JSON null) and `allow_internet_access` (nil means absent, i.e. allowed).
// Only allowOut, denyOut and rules are read; the object's other fields
// belong to other layers and are ignored. Both lists accept CIDRs, IPs and
// domains with an optional leading "*."; every malformed entry is
// reported, each as an *EntryError, joined. A malformed rules object is a
// *RuleError (see parseHeaderRules).
func ParseRules(raw json.RawMessage, allowInternet *bool) (Rules, error) {
	var r Rules
	if allowInternet != nil && !*allowInternet {
		r.InternetOff = true
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return r, nil
	}
	var n struct {
		AllowOut []string        `json:"allowOut"`
		DenyOut  []string        `json:"denyOut"`
		Rules    json.RawMessage `json:"rules"`
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return Rules{}, fmt.Errorf("network: %w", err)
	}
	var errs []error
	r.allowOut = parseList("network.allowOut", n.AllowOut, anyEntry, &errs)
	r.denyOut = parseList("network.denyOut", n.DenyOut, anyEntry, &errs)
	if err := errors.Join(errs...); err != nil {
		return Rules{}, err
	}
	var err error
	if r.headers, err = parseHeaderRules(n.Rules); err != nil {
		return Rules{}, err
	}
	return r, nil
}

// HasHeaderRules reports whether network.rules sets a header for some
// domain, which needs the egress proxy (and its interception CA).
func (r Rules) HasHeaderRules() bool {
	for _, hs := range r.headers.headers {
		if len(hs) > 0 {
			return true
		}
	}
	return false
}

// RulesJSON returns network.rules as E2B stores it: the domains in lower
// case, each domain's rules as they were sent; nil when there are none.
func (r Rules) RulesJSON() json.RawMessage {
	if len(r.headers.wire) == 0 {
		return nil
	}
	b, _ := json.Marshal(r.headers.wire) // raw messages json.Unmarshal accepted
	return b
}

func parseList(field string, list []string, kind entryKind, errs *[]error) []entry {
	if len(list) > maxEntries {
		*errs = append(*errs, fmt.Errorf("%s: %d entries, at most %d allowed", field, len(list), maxEntries))
		return nil
	}
	var out []entry
	for i, s := range list {
		e, err := parseEntry(s, kind)
		if err != nil {
			*errs = append(*errs, &EntryError{Field: field, Index: i, Entry: s, Reason: err.Error()})
			continue
		}
		out = append(out, e)
	}
	return out
}

// ruleSet is a compiled list of entries.
type ruleSet struct {
	names    nameSet
	prefixes []entry // address entries, in the order given
}

func compileSet(field string, es []entry) ruleSet {
	var s ruleSet
	for _, e := range es {
		if e.isName {
			s.names.add(e.name, field+":"+e.text)
		} else {
			s.prefixes = append(s.prefixes, entry{text: field + ":" + e.text, prefix: e.prefix})
		}
	}
	return s
}

// matchAddr returns the rule of the first prefix containing a.
func (s *ruleSet) matchAddr(a netip.Addr) (string, bool) {
	for _, e := range s.prefixes {
		if e.prefix.Contains(a) {
			return e.text, true
		}
	}
	return "", false
}

type compiledCeiling struct {
	open, widen bool
	allow, deny ruleSet
	reserved    []netip.Prefix
	allowCIDRs  []entry // = allow.prefixes, for opening private ranges
}

func compileCeiling(c Ceiling) (compiledCeiling, error) {
	var errs []error
	allowN := parseList("ceiling.allowDomains", c.AllowDomains, nameEntry, &errs)
	allowC := parseList("ceiling.allowCIDRs", c.AllowCIDRs, addrEntry, &errs)
	denyN := parseList("ceiling.denyDomains", c.DenyDomains, nameEntry, &errs)
	denyC := parseList("ceiling.denyCIDRs", c.DenyCIDRs, addrEntry, &errs)
	res := parseList("ceiling.reservedCIDRs", c.ReservedCIDRs, addrEntry, &errs)
	if err := errors.Join(errs...); err != nil {
		return compiledCeiling{}, err
	}
	cc := compiledCeiling{
		open:  c.Open,
		widen: c.SandboxMayWiden,
		allow: compileSet("ceiling", append(allowN, allowC...)),
		deny:  compileSet("ceiling.deny", append(denyN, denyC...)),
	}
	for _, e := range res {
		cc.reserved = append(cc.reserved, e.prefix)
	}
	cc.allowCIDRs = cc.allow.prefixes
	return cc, nil
}

// Decision is the outcome of one check. Rule names what decided, for the
// audit trail, e.g. "denyOut:*.example.com", "ceiling:pypi.org",
// "private:link-local 169.254.0.0/16", "ceiling:allowlist".
type Decision struct {
	Allowed bool
	Rule    string
}

func allow(rule string) Decision { return Decision{Allowed: true, Rule: rule} }
func deny(rule string) Decision  { return Decision{Rule: rule} }

// Rule texts of the built-in decisions.
const (
	RuleNoPolicy    = "no policy"
	RuleInternetOff = "allow_internet_access:false"
	RuleOpen        = "ceiling:open"
	RuleAllowlist   = "ceiling:allowlist"
	RuleIPv6        = "ipv6"
	RuleAnswer      = "answer of an allowed name"
)

// Policy is the effective egress policy of one sandbox: its Rules under a
// Ceiling. A Policy never changes after NewPolicy and is safe for concurrent
// use; the zero Policy denies everything.
type Policy struct {
	valid   bool
	ceiling compiledCeiling
	off     bool
	allow   ruleSet     // sandbox allowOut
	deny    ruleSet     // sandbox denyOut
	headers headerRules // sandbox network.rules
}

// NewPolicy combines a sandbox's rules with the operator ceiling. It fails
// only if the ceiling is invalid (which Ceiling.Validate reports at startup).
func NewPolicy(c Ceiling, r Rules) (Policy, error) {
	cc, err := compileCeiling(c)
	if err != nil {
		return Policy{}, err
	}
	return Policy{
		valid:   true,
		ceiling: cc,
		off:     r.InternetOff,
		allow:   compileSet("allowOut", r.allowOut),
		deny:    compileSet("denyOut", r.denyOut),
		headers: r.headers,
	}, nil
}

// HeaderRule returns the headers network.rules sets on requests to name
// (the rule of an exact domain, else of the longest matching wildcard) and
// that rule's domain pattern; ok is false when no rule matches. A rule
// grants no access: the proxy applies it only to connections the policy
// allowed.
func (p Policy) HeaderRule(name string) (headers []Header, pattern string, ok bool) {
	n, err := NormalizeName(name)
	if err != nil {
		return nil, "", false
	}
	return p.headers.match(n)
}

// mayWiden reports whether sandbox allowOut entries count beyond the
// ceiling's own allow lists.
func (p *Policy) mayWiden() bool { return p.ceiling.open || p.ceiling.widen }

// allowOutName reports whether a sandbox allowOut entry names the
// normalised name n (rule is that entry), and whether it counts: the
// ceiling does not deny n and either lets sandboxes widen or allows n
// itself (then rule is the ceiling's entry). A counting entry wins over
// denyOut and allow_internet_access: false, as E2B's "allowed entries
// always take precedence over denied entries".
func (p *Policy) allowOutName(n string) (rule string, named, counts bool) {
	rule, named = p.allow.names.match(n)
	if !named {
		return "", false, false
	}
	if _, denied := p.ceiling.deny.names.match(n); denied {
		return rule, true, false
	}
	if p.mayWiden() {
		return rule, true, true
	}
	if r, ok := p.ceiling.allow.names.match(n); ok {
		return r, true, true
	}
	return rule, true, false
}

// AllowName decides whether the sandbox may resolve and connect to name. An
// IP literal is judged by AllowAddr with port 0.
func (p Policy) AllowName(name string) Decision {
	if !p.valid {
		return deny(RuleNoPolicy)
	}
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")); err == nil {
		return p.AllowAddr(a, 0)
	}
	n, err := NormalizeName(name)
	if err != nil {
		return deny("invalid name: " + err.Error())
	}
	if r, ok := p.ceiling.deny.names.match(n); ok {
		return deny(r)
	}
	allowRule, named, counts := p.allowOutName(n)
	if counts {
		return allow(allowRule)
	}
	if p.off {
		return deny(RuleInternetOff)
	}
	if r, ok := p.deny.names.match(n); ok {
		return deny(r)
	}
	if r, ok := p.ceiling.allow.names.match(n); ok {
		return allow(r)
	}
	if p.ceiling.open {
		return allow(RuleOpen)
	}
	if named {
		return deny(RuleAllowlist + " (" + allowRule + " not permitted by the ceiling)")
	}
	return deny(RuleAllowlist)
}

// AllowAddr decides whether the sandbox may connect to a directly, by
// address. port is not part of any rule yet; it is accepted so that callers
// need not change when it is.
func (p Policy) AllowAddr(a netip.Addr, port uint16) Decision {
	return p.addr(a, false, false)
}

// AllowAnswer decides whether a may be used as an address of name, which
// AllowName allowed (a DNS answer, or the proxy's own resolution). It is
// AllowAddr without the allowlist: such an address needs no CIDR rule of
// its own, but private, reserved and denied addresses, and IPv6 without a
// CIDR rule, are still refused. An address of a name that a counting
// allowOut entry names is not subject to denyOut or allow_internet_access:
// false, so that allowOut ["api.example.com"] with denyOut ["0.0.0.0/0"]
// reaches that name and nothing else, as in E2B.
func (p Policy) AllowAnswer(name string, a netip.Addr, port uint16) Decision {
	n, err := NormalizeName(name)
	_, _, byAllowOut := p.allowOutName(n)
	return p.addr(a, true, err == nil && byAllowOut)
}

// addr decides a; answer says it is an address of an allowed name, and
// byAllowOut that this name is one a counting allowOut entry names.
func (p *Policy) addr(a netip.Addr, answer, byAllowOut bool) Decision {
	if !p.valid {
		return deny(RuleNoPolicy)
	}
	if !a.IsValid() {
		return deny("invalid address")
	}
	a = a.Unmap().WithZone("")
	if r, ok := p.ceiling.deny.matchAddr(a); ok {
		return deny(r)
	}
	if d, special := p.special(a); special {
		return d
	}
	allowRule, named := p.allow.matchAddr(a)
	if named {
		if p.mayWiden() {
			return allow(allowRule)
		}
		if r, ok := p.ceiling.allow.matchAddr(a); ok {
			return allow(r)
		}
	}
	if byAllowOut && a.Is4() {
		return allow(RuleAnswer)
	}
	if p.off {
		return deny(RuleInternetOff)
	}
	if r, ok := p.deny.matchAddr(a); ok {
		return deny(r)
	}
	if r, ok := p.ceiling.allow.matchAddr(a); ok {
		return allow(r)
	}
	switch {
	case a.Is6():
		return deny(RuleIPv6)
	case answer:
		return allow(RuleAnswer)
	case p.ceiling.open:
		return allow(RuleOpen)
	case named:
		return deny(RuleAllowlist + " (" + allowRule + " not permitted by the ceiling)")
	}
	return deny(RuleAllowlist)
}

// special judges addresses in reserved or private ranges: allowed only by
// a ceiling CIDR that contains a and lies inside the range.
func (p *Policy) special(a netip.Addr) (Decision, bool) {
	var rng netip.Prefix
	var rule string
	for _, r := range p.ceiling.reserved {
		if r.Contains(a) {
			rng, rule = r, "reserved:"+r.String()
			break
		}
	}
	if rule == "" {
		r, name, ok := PrivateRange(a)
		if !ok {
			return Decision{}, false
		}
		rng, rule = r, "private:"+name+" "+r.String()
	}
	for _, e := range p.ceiling.allowCIDRs {
		inside := e.prefix.Bits() >= rng.Bits() && rng.Contains(e.prefix.Addr())
		if inside && e.prefix.Contains(a) {
			return allow(e.text), true
		}
	}
	return deny(rule), true
}

// ForwardRule is one rule of the firewall for traffic that is neither
// DNS nor redirected to the proxy: packets to Prefix are accepted (Allow)
// or dropped.
type ForwardRule struct {
	Prefix netip.Prefix
	Allow  bool
}

// Forwarding returns the address side of p, for the host firewall: rules
// tried in order, the first whose prefix contains a packet's destination
// deciding; a packet none contains is dropped. It is the order addr
// applies: the ceiling's denials, then the sandbox's allowOut as far as
// the ceiling lets it count, then (unless allow_internet_access is false)
// denyOut, the ceiling's allowances and an open ceiling's 0.0.0.0/0. Only
// IPv4 prefixes appear (forwarded IPv6 is dropped whatever the rules), and
// private and reserved ranges stay closed by the firewall's own fixed
// denials, so it is the public part of the policy.
func (p Policy) Forwarding() []ForwardRule {
	if !p.valid {
		return nil
	}
	var out []ForwardRule
	add := func(prefixes []netip.Prefix, allow bool) {
		for _, pfx := range prefixes {
			if pfx.Addr().Is4() {
				out = append(out, ForwardRule{Prefix: pfx, Allow: allow})
			}
		}
	}
	add(prefixesOf(p.ceiling.deny.prefixes), false)
	allowOut := prefixesOf(p.allow.prefixes)
	if !p.mayWiden() {
		// Without widening an entry counts only where a ceiling CIDR
		// allows it too: where the two overlap, the narrower.
		var within []netip.Prefix
		for _, a := range allowOut {
			for _, c := range prefixesOf(p.ceiling.allow.prefixes) {
				if a.Overlaps(c) {
					within = append(within, narrower(a, c))
				}
			}
		}
		allowOut = within
	}
	add(allowOut, true)
	if p.off {
		return out
	}
	add(prefixesOf(p.deny.prefixes), false)
	add(prefixesOf(p.ceiling.allow.prefixes), true)
	if p.ceiling.open {
		add([]netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}, true)
	}
	return out
}

func prefixesOf(es []entry) []netip.Prefix {
	out := make([]netip.Prefix, len(es))
	for i, e := range es {
		out[i] = e.prefix
	}
	return out
}

// narrower returns the longer of two overlapping prefixes, which is
// their intersection.
func narrower(a, b netip.Prefix) netip.Prefix {
	if a.Bits() >= b.Bits() {
		return a
	}
	return b
}
