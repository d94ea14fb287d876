package api

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestDecodeMetadata(t *testing.T) {
	for _, tc := range []struct {
		name, in string // in: as net/http hands it over (decoded once)
		want     map[string]string
		bad      bool
	}{
		{name: "captured", in: "sandbox%2520Id=x%2526y%253Dz", want: map[string]string{"sandbox Id": "x&y=z"}},
		{name: "two pairs", in: "a=1&b=2", want: map[string]string{"a": "1", "b": "2"}},
		{name: "empty value", in: "a=", want: map[string]string{"a": ""}},
		{name: "no equals", in: "a", bad: true},
		{name: "two equals", in: "a=b=c", bad: true},
		{name: "empty pair", in: "a=1&", bad: true},
		{name: "bad escape", in: "a=%zz", bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, msg := decodeMetadata(tc.in)
			if tc.bad {
				if msg == "" {
					t.Errorf("decodeMetadata(%q) = %v, want an error", tc.in, got)
				}
				return
			}
			if msg != "" {
				t.Fatalf("decodeMetadata(%q): %s", tc.in, msg)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestList(t *testing.T) {
	a, b := running("isa"), paused("isb")
	a.Metadata = map[string]string{"sandbox Id": "x&y=z"}
	b.StartedAt = testNow.Add(-time.Minute)
	query := func(want store.ListQuery) func(*testing.T, *fakeSandboxes) {
		return func(t *testing.T, f *fakeSandboxes) {
			t.Helper()
			if len(f.queries) != 1 {
				t.Fatalf("%d queries, want 1", len(f.queries))
			}
			if d := cmp.Diff(want, f.queries[0]); d != "" {
				t.Errorf("query (-want +got):\n%s", d)
			}
		}
	}
	onePage := func() *fakeSandboxes {
		f := newFake()
		f.pages = [][]store.Sandbox{{a, b}}
		return f
	}
	twoPages := func() *fakeSandboxes {
		f := newFake()
		f.pages = [][]store.Sandbox{{a}, {b}}
		return f
	}
	runCases(t, onePage, []apiCase{
		{name: "items", method: "GET", target: "/v2/sandboxes", status: 200,
			wantHeader: map[string]string{"X-Next-Token": ""},
			wantJSON: `[
				{"sandboxID":"isa","templateID":"tpl1","alias":"base","clientID":"6532622b",
				 "startedAt":"2025-01-02T03:04:05Z","endAt":"2025-01-02T03:09:05Z","cpuCount":2,"memoryMB":512,
				 "diskSizeMB":1024,"metadata":{"sandbox Id":"x&y=z"},"state":"running","envdVersion":"0.6.4"},
				{"sandboxID":"isb","templateID":"tpl1","alias":"base","clientID":"6532622b",
				 "startedAt":"2025-01-02T03:03:05Z","endAt":"2025-01-02T03:09:05Z","cpuCount":2,"memoryMB":512,
				 "diskSizeMB":1024,"state":"paused","envdVersion":"0.6.4"}]`,
			check: query(store.ListQuery{})},
		{name: "captured metadata encoding", method: "GET",
			target: "/v2/sandboxes?metadata=sandbox%252520Id%3Dx%252526y%25253Dz", status: 200,
			check: query(store.ListQuery{Metadata: map[string]string{"sandbox Id": "x&y=z"}})},
		{name: "every filter", method: "GET",
			target: "/v2/sandboxes?state=running,paused&order=asc&startedAfter=2025-01-02T03:04:05.123Z&template=base&limit=1&nextToken=tok",
			status: 200,
			check: query(store.ListQuery{States: []store.State{store.StateRunning, store.StatePaused}, Order: store.OrderAsc,
				StartedAfter: time.Date(2025, 1, 2, 3, 4, 5, 123e6, time.UTC), TemplateID: "base", Limit: 1, NextToken: "tok"})},
		{name: "limit clamped", method: "GET", target: "/v2/sandboxes?limit=500", status: 200,
			check: query(store.ListQuery{Limit: 100})},
		{name: "bad metadata", method: "GET", target: "/v2/sandboxes?metadata=abc", status: 400},
		{name: "bad state", method: "GET", target: "/v2/sandboxes?state=running,killed", status: 400,
			wantJSON: `{"code":400,"message":"invalid state \"killed\": want running or paused"}`},
		{name: "bad order", method: "GET", target: "/v2/sandboxes?order=up", status: 400},
		{name: "bad startedAfter", method: "GET", target: "/v2/sandboxes?startedAfter=yesterday", status: 400},
		{name: "template tag", method: "GET", target: "/v2/sandboxes?template=base:v1", status: 400},
		{name: "bad limit", method: "GET", target: "/v2/sandboxes?limit=ten", status: 400},
		{name: "zero limit", method: "GET", target: "/v2/sandboxes?limit=0", status: 400},
	})
	runCases(t, twoPages, []apiCase{
		{name: "next token when more", method: "GET", target: "/v2/sandboxes?limit=1", status: 200,
			wantHeader: map[string]string{"X-Next-Token": "page1"}},
		{name: "legacy collects pages, running only", method: "GET",
			target: "/sandboxes?metadata=sandbox%252520Id%3Dx%252526y%25253Dz", status: 200,
			wantHeader: map[string]string{"X-Next-Token": ""},
			check: func(t *testing.T, f *fakeSandboxes) {
				want := []store.ListQuery{
					{States: []store.State{store.StateRunning}, Metadata: map[string]string{"sandbox Id": "x&y=z"}, Limit: 100},
					{States: []store.State{store.StateRunning}, Metadata: map[string]string{"sandbox Id": "x&y=z"}, Limit: 100, NextToken: "page1"},
				}
				if d := cmp.Diff(want, f.queries); d != "" {
					t.Errorf("queries (-want +got):\n%s", d)
				}
			}},
	})
}

func TestListBadToken(t *testing.T) {
	f := newFake()
	f.fail = store.ErrInvalidToken
	h := newHandler(t, f)
	w := serve(h, apiCase{method: "GET", target: "/v2/sandboxes?nextToken=garbage"})
	if w.Code != 400 {
		t.Errorf("status %d, want 400", w.Code)
	}
}
