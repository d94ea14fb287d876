package egress

import (
	"context"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// Cache is an Upstream that keeps successful answers for their TTL (at
// most MaxTTL). One Cache can serve every sandbox: answers are the
// public DNS's, and each sandbox's policy filters them after the cache. It
// saves the proxy a round trip for a name the sandbox has just resolved.
type Cache struct {
	Upstream Upstream
	// MaxTTL caps how long an answer is kept (default 60s); MaxEntries
	// bounds the cache (default 10000; when full it starts over).
	MaxTTL     time.Duration
	MaxEntries int
	// Now is the clock (default time.Now).
	Now func() time.Time

	mu      sync.Mutex // guards entries
	entries map[cacheKey]cacheEntry
}

var _ Upstream = (*Cache)(nil)

type cacheKey struct {
	name string
	typ  dnsmessage.Type
}

type cacheEntry struct {
	answers []dnsmessage.Resource
	expires time.Time
}

// Exchange implements Upstream.
func (c *Cache) Exchange(ctx context.Context, q dnsmessage.Message) (dnsmessage.Message, error) {
	if len(q.Questions) != 1 || q.Questions[0].Class != dnsmessage.ClassINET {
		return c.Upstream.Exchange(ctx, q)
	}
	now := c.now()
	key := cacheKey{strings.ToLower(q.Questions[0].Name.String()), q.Questions[0].Type}
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
		return dnsmessage.Message{
			Header:    dnsmessage.Header{ID: q.ID, Response: true, RecursionDesired: q.RecursionDesired, RecursionAvailable: true},
			Questions: q.Questions,
			Answers:   e.answers,
		}, nil
	}
	m, err := c.Upstream.Exchange(ctx, q)
	if err != nil || m.RCode != dnsmessage.RCodeSuccess || m.Truncated {
		return m, err
	}
	ttl := c.maxTTL()
	for _, a := range m.Answers {
		ttl = min(ttl, time.Duration(a.Header.TTL)*time.Second)
	}
	if ttl > 0 {
		c.mu.Lock()
		if c.entries == nil || len(c.entries) >= c.maxEntries() {
			c.entries = map[cacheKey]cacheEntry{}
		}
		c.entries[key] = cacheEntry{answers: m.Answers, expires: now.Add(ttl)}
		c.mu.Unlock()
	}
	return m, nil
}

func (c *Cache) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Cache) maxTTL() time.Duration {
	if c.MaxTTL > 0 {
		return c.MaxTTL
	}
	return time.Minute
}

func (c *Cache) maxEntries() int {
	if c.MaxEntries > 0 {
		return c.MaxEntries
	}
	return 10000
}
