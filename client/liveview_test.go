package client

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestCreateLiveView(t *testing.T) {
	api := newFakeAPI()
	api.add(SandboxInfo{ID: "isb1"})
	ts := httptest.NewServer(api)
	defer ts.Close()
	c, err := New(Config{APIURL: ts.URL, APIKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ttl  time.Duration
		body string
	}{
		{"server's default", 0, `{}`},
		{"rounded up to seconds", 1500 * time.Millisecond, `{"ttl":2}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lv, err := c.CreateLiveView(t.Context(), "isb1", tc.ttl)
			if err != nil {
				t.Fatal(err)
			}
			want := &LiveView{URL: "http://6090-isb1.example.test/vnc.html", TakeoverURL: "http://6091-isb1.example.test/vnc.html",
				ExpiresAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
			if diff := cmp.Diff(want, lv); diff != "" {
				t.Errorf("live view (-want +got):\n%s", diff)
			}
			if got := api.last(); got.Method != "POST" || got.Path != "/sandboxes/isb1/live-view" || got.Body != tc.body {
				t.Errorf("sent %s %s %q; want POST /sandboxes/isb1/live-view %s", got.Method, got.Path, got.Body, tc.body)
			}
		})
	}
	if _, err := c.CreateLiveView(t.Context(), "isb1", -time.Second); err == nil {
		t.Error("a negative ttl was sent")
	}
}
