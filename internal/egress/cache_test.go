package egress

import (
	"context"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// countingUpstream answers every A query with one address and the given
// TTL (NXDOMAIN for "nx.test."), counting the queries.
type countingUpstream struct {
	ttl     uint32
	queries int
}

func (u *countingUpstream) Exchange(_ context.Context, q dnsmessage.Message) (dnsmessage.Message, error) {
	u.queries++
	m := dnsmessage.Message{Header: dnsmessage.Header{ID: q.ID, Response: true}, Questions: q.Questions}
	if q.Questions[0].Name.String() == "nx.test." {
		m.RCode = dnsmessage.RCodeNameError
		return m, nil
	}
	m.Answers = []dnsmessage.Resource{{
		Header: dnsmessage.ResourceHeader{Name: q.Questions[0].Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: u.ttl},
		Body:   &dnsmessage.AResource{A: [4]byte{198, 18, 0, 1}},
	}}
	return m, nil
}

func TestCache(t *testing.T) {
	now := time.Unix(1000, 0)
	up := &countingUpstream{ttl: 30}
	c := &Cache{Upstream: up, MaxTTL: 10 * time.Second, Now: func() time.Time { return now }}
	ask := func(name string, id uint16) dnsmessage.Message {
		t.Helper()
		q := upstreamQuery(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
		q.ID = id
		m, err := c.Exchange(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		if m.ID != id {
			t.Errorf("answer ID %d, want the query's %d", m.ID, id)
		}
		return m
	}
	ask("a.test.", 1)
	if m := ask("A.test.", 2); up.queries != 1 || len(m.Answers) != 1 {
		t.Errorf("second ask (other case): %d upstream queries, %d answers; want 1 and 1", up.queries, len(m.Answers))
	}
	now = now.Add(11 * time.Second) // past MaxTTL, within the record's TTL
	ask("a.test.", 3)
	if up.queries != 2 {
		t.Errorf("after MaxTTL: %d upstream queries, want 2", up.queries)
	}
	ask("nx.test.", 4)
	ask("nx.test.", 5)
	if up.queries != 4 {
		t.Errorf("NXDOMAIN: %d upstream queries, want 4 (not cached)", up.queries)
	}
	up.ttl = 0
	ask("zero.test.", 6)
	ask("zero.test.", 7)
	if up.queries != 6 {
		t.Errorf("TTL 0: %d upstream queries, want 6 (not cached)", up.queries)
	}
}
