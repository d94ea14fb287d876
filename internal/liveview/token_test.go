package liveview

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

func TestVerify(t *testing.T) {
	s, err := NewSigner(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewSigner(bytes.Repeat([]byte{8}, 32))
	now := time.Unix(1_800_000_000, 0)
	later := now.Add(time.Minute)
	view := s.Sign("sbx1", false, later)
	takeover := s.Sign("sbx1", true, later)
	for _, tc := range []struct {
		name  string
		token string
		id    string
		port  int
		at    time.Time
		want  error
	}{
		{"view token, view port", view, "sbx1", ViewPort, now, nil},
		{"takeover token, takeover port", takeover, "sbx1", TakeoverPort, now, nil},
		{"takeover token, view port", takeover, "sbx1", ViewPort, now, nil},
		{"view token, takeover port", view, "sbx1", TakeoverPort, now, ErrInvalid},
		{"another sandbox", view, "sbx2", ViewPort, now, ErrInvalid},
		{"another port", takeover, "sbx1", 5911, now, ErrInvalid},
		{"expired", view, "sbx1", ViewPort, later, ErrExpired},
		{"another key", other.Sign("sbx1", true, later), "sbx1", TakeoverPort, now, ErrInvalid},
		{"tampered", view[:3] + "A" + view[4:], "sbx1", ViewPort, now, ErrInvalid},
		{"no signature", "eyJzaWQiOiJzYngxIn0", "sbx1", ViewPort, now, ErrInvalid},
		{"empty", "", "sbx1", ViewPort, now, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.Verify(tc.token, tc.id, tc.port, tc.at); !errors.Is(err, tc.want) {
				t.Errorf("Verify = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestNewSignerShortKey(t *testing.T) {
	if _, err := NewSigner(make([]byte, 16)); err == nil {
		t.Error("NewSigner accepted a 16-byte key")
	}
}
