package api

import (
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFork(t *testing.T) {
	forks := func(want ...[2]int) func(*testing.T, *fakeSandboxes) {
		return func(t *testing.T, f *fakeSandboxes) {
			t.Helper()
			if d := cmp.Diff(want, f.forks); d != "" {
				t.Errorf("forks [timeout s, count] (-want +got):\n%s", d)
			}
		}
	}
	child := `{"sandboxID":"isf1","templateID":"tpl1","alias":"base","clientID":"6532622b","envdVersion":"0.6.4",
		"envdAccessToken":"tok-isf1","trafficAccessToken":null,"domain":"example.test"}`
	runCases(t, fakeWith(running("isb1")), []apiCase{
		// 2.51 sends no timeout without timeoutMs: E2B's default is 15 s.
		{name: "defaults", method: "POST", target: "/sandboxes/isb1/fork", body: `{}`, status: 201,
			wantJSON: `[{"sandbox":` + child + `,"mode":"filesystem"}]`, check: forks([2]int{15, 1})},
		{name: "no body", method: "POST", target: "/sandboxes/isb1/fork", status: 201, check: forks([2]int{15, 1})},
		{name: "one fails", method: "POST", target: "/sandboxes/isb1/fork", body: `{"timeout":60,"count":3}`, status: 201,
			wantJSON: `[{"sandbox":` + child + `,"mode":"filesystem"},
				{"error":{"code":429,"message":"this server runs its maximum of 2 sandboxes; kill one first"}},
				{"sandbox":{"sandboxID":"isf2","templateID":"tpl1","alias":"base","clientID":"6532622b","envdVersion":"0.6.4",
					"envdAccessToken":"tok-isf2","trafficAccessToken":null,"domain":"example.test"},"mode":"filesystem"}]`,
			check: forks([2]int{60, 3})},
		{name: "count 0", method: "POST", target: "/sandboxes/isb1/fork", body: `{"count":0}`, status: 400, check: forks()},
		{name: "count 101", method: "POST", target: "/sandboxes/isb1/fork", body: `{"count":101}`, status: 400, check: forks()},
		{name: "count huge", method: "POST", target: "/sandboxes/isb1/fork", body: `{"count":1e9}`, status: 400},
		{name: "unknown", method: "POST", target: "/sandboxes/nope/fork", body: `{}`, status: 404, wantJSON: notFoundBody},
	})
}

func TestSnapshots(t *testing.T) {
	runCases(t, fakeWith(running("isb1")), []apiCase{
		{name: "create unnamed", method: "POST", target: "/sandboxes/isb1/snapshots", body: `{}`, status: 201,
			wantJSON: `{"snapshotID":"ssn1:default","names":[],"mode":"filesystem"}`},
		{name: "create named", method: "POST", target: "/sandboxes/isb1/snapshots", body: `{"name":"mine:v1"}`, status: 201,
			wantJSON: `{"snapshotID":"mine:v1","names":["mine"],"mode":"filesystem"}`},
		{name: "create on unknown", method: "POST", target: "/sandboxes/nope/snapshots", body: `{}`, status: 404, wantJSON: notFoundBody},
		{name: "list empty", method: "GET", target: "/snapshots", status: 200, wantJSON: `[]`,
			wantHeader: map[string]string{"X-Next-Token": ""}},
		{name: "bad limit", method: "GET", target: "/snapshots?limit=0", status: 400},
		{name: "bad token", method: "GET", target: "/snapshots?nextToken=x", status: 400,
			wantJSON: `{"code":400,"message":"Invalid next token"}`},
		// openapi-fetch percent-encodes the whole ID in one segment.
		{name: "delete", method: "DELETE", target: "/templates/ssn1%3Adefault", status: 204, wantEmpty: true,
			check: func(t *testing.T, f *fakeSandboxes) {
				if d := cmp.Diff([]string{"ssn1:default"}, f.deleted); d != "" {
					t.Errorf("deleted (-want +got):\n%s", d)
				}
			}},
		{name: "delete unknown", method: "DELETE", target: "/templates/gone%3Adefault", status: 404,
			wantJSON: `{"code":404,"message":"snapshot 'gone:default' not found"}`},
		{name: "delete in use", method: "DELETE", target: "/templates/busy%3Adefault", status: 400,
			wantJSON: `{"code":400,"message":"cannot delete template 'busy:default' because there are running sandboxes using it"}`},
		{name: "delete needs a key", method: "DELETE", target: "/templates/ssn1%3Adefault", header: map[string]string{"X-API-Key": ""},
			status: http.StatusUnauthorized},
	})
}

func TestListSnapshotsPages(t *testing.T) {
	f := newFake(running("isb1"), running("isb2"))
	h := newHandler(t, f)
	for _, c := range []apiCase{
		{method: "POST", target: "/sandboxes/isb1/snapshots", body: `{}`},
		{method: "POST", target: "/sandboxes/isb2/snapshots", body: `{"name":"b"}`},
		{method: "POST", target: "/sandboxes/isb1/snapshots", body: `{"name":"c:v2"}`},
	} {
		if w := serve(h, c); w.Code != 201 {
			t.Fatalf("%s: %d %s", c.target, w.Code, w.Body)
		}
	}
	var got []string
	next := ""
	for page := 0; page < 5; page++ {
		target := "/snapshots?sandboxID=isb1&limit=1"
		if next != "" {
			target += "&nextToken=" + next
		}
		w := serve(h, apiCase{method: "GET", target: target})
		if w.Code != 200 {
			t.Fatalf("%s: %d %s", target, w.Code, w.Body)
		}
		got = append(got, w.Body.String())
		if next = w.Header().Get("X-Next-Token"); next == "" {
			break
		}
	}
	want := []string{
		`[{"snapshotID":"c:v2","names":["c"],"mode":"filesystem"}]` + "\n",
		`[{"snapshotID":"ssn1:default","names":[],"mode":"filesystem"}]` + "\n",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("pages (-want +got):\n%s", d)
	}
}
