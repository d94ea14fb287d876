package egress

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// Bounds of network.rules, E2B's (infra's sandbox create handler).
const (
	maxRuleDomains        = 10
	maxRuleDomainLen      = 128
	maxRulesPerDomain     = 1
	maxRuleHeaders        = 20
	maxRuleHeaderNameLen  = 64
	maxRuleHeaderValueLen = 2048
)

// Header is one header a rule sets on a request, replacing any of that
// name the request has.
type Header struct {
	Name, Value string
}

// headerRules are the header transforms of network.rules, by domain
// pattern.
type headerRules struct {
	names   nameSet                      // pattern → the pattern, normalised
	headers map[string][]Header          // normalised pattern → its headers, by name
	wire    map[string][]json.RawMessage // normalised pattern → its rules as sent
}

// match returns the headers of the rule whose pattern matches the
// normalised name n (exact before the longest wildcard) and that pattern.
func (hr *headerRules) match(n string) ([]Header, string, bool) {
	pattern, ok := hr.names.match(n)
	if !ok {
		return nil, "", false
	}
	return hr.headers[pattern], pattern, true
}

// headersOutOfReach are the headers a rule may not set: they frame the
// request or its connection, or route it, and the proxy owns them.
var headersOutOfReach = []string{
	"Connection", "Content-Length", "Host", "Keep-Alive", "Proxy-Connection",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// parseHeaderRules reads network.rules: {domain: [{"transform":
// {"headers": {name: value}}}]}. Domains are exact DNS names or "*." and
// one, matched case-insensitively; a rule without a transform, or a
// transform without headers, sets nothing. The limits and messages are
// E2B's; values naming E2B's secrets or identity tokens, which this server
// does not have, and headers that frame or route the request are refused
// rather than sent as they are.
func parseHeaderRules(raw json.RawMessage) (headerRules, error) {
	var hr headerRules
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return hr, nil
	}
	var byDomain map[string][]json.RawMessage
	if err := json.Unmarshal(raw, &byDomain); err != nil {
		return hr, fmt.Errorf("network.rules: %w", err)
	}
	if len(byDomain) > maxRuleDomains {
		return hr, ruleErrorf("Network rules can have at most %d domains.", maxRuleDomains)
	}
	domains := make([]string, 0, len(byDomain))
	for d := range byDomain {
		domains = append(domains, d)
	}
	slices.Sort(domains) // the first error is the same every time
	hr.headers = make(map[string][]Header, len(domains))
	hr.wire = make(map[string][]json.RawMessage, len(domains))
	for _, domain := range domains {
		pattern, err := parseRuleDomain(domain)
		if err != nil {
			return headerRules{}, err
		}
		key := pattern.String()
		if _, dup := hr.headers[key]; dup {
			return headerRules{}, ruleErrorf("Rule domain %q is given twice: domains are matched without regard to case.", domain)
		}
		rules := byDomain[domain]
		if len(rules) > maxRulesPerDomain {
			return headerRules{}, ruleErrorf("Domain %q can have at most %d transform rule.", domain, maxRulesPerDomain)
		}
		var headers []Header
		for _, r := range rules {
			h, err := parseRule(domain, r)
			if err != nil {
				return headerRules{}, err
			}
			headers = append(headers, h...)
		}
		hr.headers[key], hr.wire[key] = headers, rules
		hr.names.add(pattern, key)
	}
	return hr, nil
}

// parseRuleDomain checks a key of network.rules.
func parseRuleDomain(domain string) (namePattern, error) {
	switch {
	case domain == "":
		return namePattern{}, ruleErrorf("Rule domain must not be empty.")
	case len(domain) > maxRuleDomainLen:
		return namePattern{}, ruleErrorf("Rule domain %q exceeds maximum length of %d characters.", domain, maxRuleDomainLen)
	}
	_, addrErr := netip.ParseAddr(domain)
	_, prefixErr := netip.ParsePrefix(domain)
	p, err := parseNamePattern(domain)
	if addrErr == nil || prefixErr == nil || err != nil || strings.HasSuffix(domain, ".") {
		return namePattern{}, ruleErrorf("Rule domain %q is not a valid domain name.", domain)
	}
	return p, nil
}

// parseRule reads one rule of domain: {"transform": {"headers": {...}}},
// either level null or absent. Unknown fields are refused: a field this
// server does not know is one it would not obey.
func parseRule(domain string, raw json.RawMessage) ([]Header, error) {
	var rule struct {
		Transform *struct {
			Headers map[string]string `json:"headers"`
		} `json:"transform"`
	}
	if err := strictUnmarshal(raw, &rule); err != nil {
		return nil, fmt.Errorf("network.rules[%q]: %w", domain, err)
	}
	if rule.Transform == nil {
		return nil, nil
	}
	if len(rule.Transform.Headers) > maxRuleHeaders {
		return nil, ruleErrorf("Domain %q can have at most %d headers per rule.", domain, maxRuleHeaders)
	}
	var headers []Header
	for name, value := range rule.Transform.Headers {
		if err := checkRuleHeader(domain, name, value); err != nil {
			return nil, err
		}
		headers = append(headers, Header{Name: http.CanonicalHeaderKey(name), Value: value})
	}
	slices.SortFunc(headers, func(a, b Header) int { return strings.Compare(a.Name, b.Name) })
	for i := 1; i < len(headers); i++ {
		if headers[i].Name == headers[i-1].Name {
			return nil, ruleErrorf("Header %q in rule for domain %q is given twice: header names are matched without regard to case.", headers[i].Name, domain)
		}
	}
	return headers, nil
}

// checkRuleHeader checks one header of a rule of domain.
func checkRuleHeader(domain, name, value string) error {
	switch {
	case name == "":
		return ruleErrorf("Header name in rule for domain %q must not be empty.", domain)
	case !httpguts.ValidHeaderFieldName(name):
		return ruleErrorf("Header name %q in rule for domain %q must contain only valid HTTP token characters.", name, domain)
	case len(name) > maxRuleHeaderNameLen:
		return ruleErrorf("Header name %q in rule for domain %q exceeds maximum length of %d characters.", name, domain, maxRuleHeaderNameLen)
	case !httpguts.ValidHeaderFieldValue(value):
		return ruleErrorf("Value for header %q in rule for domain %q contains invalid characters.", name, domain)
	case len(value) > maxRuleHeaderValueLen:
		return ruleErrorf("Value for header %q in rule for domain %q exceeds maximum length of %d characters.", name, domain, maxRuleHeaderValueLen)
	case slices.Contains(headersOutOfReach, http.CanonicalHeaderKey(name)):
		return ruleErrorf("Header %q in rule for domain %q cannot be set by a rule: the egress proxy frames and routes the request itself.", name, domain)
	case strings.Contains(value, "${e2b.secrets.") || strings.Contains(value, "${e2b.identity.tokens."):
		return ruleErrorf("Value for header %q in rule for domain %q names an E2B secret or identity token (${e2b.…}): this server has neither, and would send the placeholder as it is.", name, domain)
	}
	return nil
}

// RuleError is a malformed network.rules. Its message, in E2B's words
// where E2B has some, is meant for the user who wrote the rules.
type RuleError struct{ msg string }

func (e *RuleError) Error() string { return e.msg }

func ruleErrorf(format string, args ...any) error {
	return &RuleError{msg: fmt.Sprintf(format, args...)}
}

// strictUnmarshal decodes raw into v, refusing fields v does not have.
func strictUnmarshal(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
