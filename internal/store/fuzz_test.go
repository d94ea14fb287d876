package store

import (
	"encoding/base64"
	"errors"
	"testing"
)

// FuzzCursor checks the page-token decoder of ListSandboxes: any token is
// either a cursor or ErrInvalidToken (never a panic), a decoded cursor
// re-encodes to a token that decodes to the same cursor, and every cursor
// ListSandboxes can issue decodes back to itself.
func FuzzCursor(f *testing.F) {
	for _, c := range []cursor{
		{startedAt: 1735787045000000000, id: "isb1", order: OrderDesc},
		{startedAt: -1, id: "a.b.c", order: OrderAsc},
		{startedAt: 0, id: "\x00\xff", order: OrderAsc},
	} {
		f.Add(c.encode(), c.startedAt, c.id, c.order == OrderAsc)
	}
	f.Add("", int64(0), "", false)
	f.Add("not base64!", int64(1), "x", true)
	f.Add(base64.RawURLEncoding.EncodeToString([]byte("v1.12.sideways.isb1")), int64(1), "x", true)
	f.Add(base64.RawURLEncoding.EncodeToString([]byte("v1.99999999999999999999.asc.isb1")), int64(1), "x", true)
	f.Add(base64.RawURLEncoding.EncodeToString([]byte("v2.1.asc.isb1")), int64(1), "x", true)
	f.Add(base64.StdEncoding.EncodeToString([]byte("v1.1.asc.isb1")), int64(1), "x", true)

	f.Fuzz(func(t *testing.T, tok string, ns int64, id string, asc bool) {
		c, err := decodeCursor(tok)
		if err != nil {
			if !errors.Is(err, ErrInvalidToken) {
				t.Fatalf("decodeCursor(%q) = %v, want ErrInvalidToken", tok, err)
			}
		} else {
			if c.id == "" || (c.order != OrderAsc && c.order != OrderDesc) {
				t.Fatalf("decodeCursor(%q) accepted %+v", tok, c)
			}
			again, err := decodeCursor(c.encode())
			if err != nil || again != c {
				t.Fatalf("decodeCursor(%q) = %+v; its re-encoding decodes to %+v, %v", tok, c, again, err)
			}
		}

		if id == "" {
			return // ListSandboxes never issues a cursor without an ID
		}
		want := cursor{startedAt: ns, id: id, order: OrderDesc}
		if asc {
			want.order = OrderAsc
		}
		got, err := decodeCursor(want.encode())
		if err != nil || got != want {
			t.Fatalf("cursor %+v round-trips to %+v, %v", want, got, err)
		}
	})
}
