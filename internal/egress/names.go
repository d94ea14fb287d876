package egress

import (
	"errors"
	"fmt"
	"strings"
)

// Limits on DNS names (RFC 1035 §2.3.4), in their presentation form without
// the trailing dot.
const (
	maxNameLen  = 253
	maxLabelLen = 63
)

// NormalizeName returns name in lower case without a trailing dot, or an
// error saying why it is not a DNS name we can judge. Letters, digits, '-'
// and '_' are accepted in labels ('_' appears in SRV and TXT owner names).
// Internationalised names must be given in their ASCII (xn--) form: a name
// with non-ASCII characters is rejected rather than guessed at.
func NormalizeName(name string) (string, error) {
	n := strings.TrimSuffix(name, ".")
	if n == "" {
		return "", errors.New("empty name")
	}
	if len(n) > maxNameLen {
		return "", fmt.Errorf("name longer than %d characters", maxNameLen)
	}
	for i := 0; i < len(n); i++ {
		if n[i] >= 0x80 {
			return "", errors.New("non-ASCII name: give internationalised names in their xn-- (punycode) form")
		}
	}
	n = strings.ToLower(n)
	for label := range strings.SplitSeq(n, ".") {
		if label == "" {
			return "", errors.New("empty label")
		}
		if len(label) > maxLabelLen {
			return "", fmt.Errorf("label %q longer than %d characters", label, maxLabelLen)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
			if !ok {
				return "", fmt.Errorf("invalid character %q in label %q", c, label)
			}
		}
	}
	return n, nil
}

// namePattern is one domain rule: an exact name, or "*." and a suffix that
// matches every name with at least one more label.
type namePattern struct {
	domain   string // normalised, without "*."
	wildcard bool
}

func (p namePattern) String() string {
	if p.wildcard {
		return "*." + p.domain
	}
	return p.domain
}

// parseNamePattern parses "example.com" or "*.example.com".
func parseNamePattern(s string) (namePattern, error) {
	wildcard := false
	rest := s
	if strings.HasPrefix(s, "*.") {
		wildcard, rest = true, s[2:]
	}
	if strings.Contains(rest, "*") {
		return namePattern{}, errors.New(`a wildcard is allowed only as a leading "*." followed by a domain`)
	}
	n, err := NormalizeName(rest)
	if err != nil {
		return namePattern{}, err
	}
	return namePattern{domain: n, wildcard: wildcard}, nil
}

// nameSet matches normalised names against a set of patterns in time
// proportional to the number of labels, keeping the first pattern text
// given for each entry so that decisions can name it.
type nameSet struct {
	exact    map[string]string // domain -> rule text
	wildcard map[string]string // suffix -> rule text
}

func (s *nameSet) add(p namePattern, rule string) {
	m := &s.exact
	if p.wildcard {
		m = &s.wildcard
	}
	if *m == nil {
		*m = make(map[string]string)
	}
	if _, dup := (*m)[p.domain]; !dup {
		(*m)[p.domain] = rule
	}
}

// match reports the rule text of a pattern matching the normalised name n.
// An exact entry wins over a wildcard; among wildcards the longest suffix
// wins.
func (s *nameSet) match(n string) (string, bool) {
	if r, ok := s.exact[n]; ok {
		return r, true
	}
	if len(s.wildcard) == 0 {
		return "", false
	}
	for i := strings.IndexByte(n, '.'); i >= 0; {
		suffix := n[i+1:]
		if r, ok := s.wildcard[suffix]; ok {
			return r, true
		}
		j := strings.IndexByte(suffix, '.')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return "", false
}
