package store

import (
	"context"
	"encoding/base64"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// collectPages lists with q until no token is returned and returns the ids
// of each page. It fails the test after too many pages.
func collectPages(t *testing.T, s *Store, q ListQuery) [][]string {
	t.Helper()
	var pages [][]string
	for range 20 {
		got, next, err := s.ListSandboxes(context.Background(), q)
		if err != nil {
			t.Fatalf("ListSandboxes(%+v): %v", q, err)
		}
		pages = append(pages, ids(got))
		if next == "" {
			return pages
		}
		q.NextToken = next
	}
	t.Fatal("too many pages")
	return nil
}

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// seedList stores sandboxes a, b, c started one second apart (c newest).
func seedList(t *testing.T) *Store {
	t.Helper()
	s, _ := openTest(t)
	for i, id := range []string{"a", "b", "c"} {
		if _, err := s.CreateSandbox(context.Background(), testSandbox(id, t0.Add(time.Duration(i)*time.Second))); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func TestListOrderAndPaging(t *testing.T) {
	s := seedList(t)
	tests := []struct {
		name string
		q    ListQuery
		want [][]string
	}{
		{"default is desc, one page", ListQuery{}, [][]string{{"c", "b", "a"}}},
		{"asc", ListQuery{Order: OrderAsc}, [][]string{{"a", "b", "c"}}},
		{"limit 1 desc", ListQuery{Limit: 1}, [][]string{{"c"}, {"b"}, {"a"}}},
		{"limit 1 asc", ListQuery{Limit: 1, Order: OrderAsc}, [][]string{{"a"}, {"b"}, {"c"}}},
		{"limit 2", ListQuery{Limit: 2}, [][]string{{"c", "b"}, {"a"}}},
		{"limit 3 exact, no token", ListQuery{Limit: 3}, [][]string{{"c", "b", "a"}}},
		{"limit 4", ListQuery{Limit: 4}, [][]string{{"c", "b", "a"}}},
		{"negative limit clamps to 1", ListQuery{Limit: -5}, [][]string{{"c"}, {"b"}, {"a"}}},
		{"huge limit clamps to 100", ListQuery{Limit: 1000}, [][]string{{"c", "b", "a"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, collectPages(t, s, tc.q)); diff != "" {
				t.Errorf("pages (-want +got):\n%s", diff)
			}
		})
	}
}

func TestListTiesBrokenByID(t *testing.T) {
	s, _ := openTest(t)
	for _, id := range []string{"y", "x", "z"} {
		if _, err := s.CreateSandbox(context.Background(), testSandbox(id, t0)); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff([][]string{{"z"}, {"y"}, {"x"}}, collectPages(t, s, ListQuery{Limit: 1})); diff != "" {
		t.Errorf("desc pages (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([][]string{{"x", "y"}, {"z"}}, collectPages(t, s, ListQuery{Limit: 2, Order: OrderAsc})); diff != "" {
		t.Errorf("asc pages (-want +got):\n%s", diff)
	}
}

func TestListLimitDefault(t *testing.T) {
	s, _ := openTest(t)
	for i := range 101 {
		sb := testSandbox("i"+string(rune('a'+i/26))+string(rune('a'+i%26)), t0.Add(time.Duration(i)*time.Millisecond))
		if _, err := s.CreateSandbox(context.Background(), sb); err != nil {
			t.Fatal(err)
		}
	}
	got, next, err := s.ListSandboxes(context.Background(), ListQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != DefaultListLimit || next == "" {
		t.Errorf("first page: %d sandboxes, token %q; want %d and a token", len(got), next, DefaultListLimit)
	}
	got, next, err = s.ListSandboxes(context.Background(), ListQuery{NextToken: next})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || next != "" {
		t.Errorf("second page: %d sandboxes, token %q; want 1 and no token", len(got), next)
	}
}

func TestListFilters(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	ms := time.Millisecond
	seed := []struct {
		id       string
		started  time.Time
		state    State
		template string
		alias    string
		meta     map[string]string
	}{
		{"run1", t0.Add(100 * ms), StateRunning, "tmpl-1", "base", map[string]string{"sandbox Id": "x&y=z", "team": "a"}},
		{"run2", t0.Add(200 * ms), StateRunning, "tmpl-2", "desktop", map[string]string{"team": "a", "ключ": "значение ✓"}},
		{"paused", t0.Add(300 * ms), StatePaused, "tmpl-1", "base", map[string]string{"team": "b", "a=b": "c&d"}},
		{"killed", t0.Add(400 * ms), StateKilled, "tmpl-1", "base", map[string]string{"team": "a"}},
		{"starting", t0.Add(500 * ms), StateStarting, "tmpl-1", "base", nil},
		{"errored", t0.Add(600 * ms), StateError, "tmpl-1", "base", nil},
	}
	for _, sd := range seed {
		sb := Sandbox{ID: sd.id, TemplateID: sd.template, Alias: sd.alias, State: sd.state, StartedAt: sd.started, Metadata: sd.meta}
		if _, err := s.CreateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		q    ListQuery
		want []string
	}{
		{"default hides killed, starting, error", ListQuery{}, []string{"paused", "run2", "run1"}},
		{"running only", ListQuery{States: []State{StateRunning}}, []string{"run2", "run1"}},
		{"paused only", ListQuery{States: []State{StatePaused}}, []string{"paused"}},
		{"killed when asked", ListQuery{States: []State{StateKilled}}, []string{"killed"}},
		{"metadata one pair", ListQuery{Metadata: map[string]string{"team": "a"}}, []string{"run2", "run1"}},
		{"metadata AND", ListQuery{Metadata: map[string]string{"team": "a", "sandbox Id": "x&y=z"}}, []string{"run1"}},
		{"metadata AND, one pair wrong", ListQuery{Metadata: map[string]string{"team": "b", "sandbox Id": "x&y=z"}}, nil},
		{"metadata & and = in key and value", ListQuery{Metadata: map[string]string{"a=b": "c&d"}}, []string{"paused"}},
		{"metadata unicode", ListQuery{Metadata: map[string]string{"ключ": "значение ✓"}}, []string{"run2"}},
		{"metadata value prefix does not match", ListQuery{Metadata: map[string]string{"sandbox Id": "x&y"}}, nil},
		{"metadata unknown key", ListQuery{Metadata: map[string]string{"nope": "a"}}, nil},
		{"metadata on killed when asked", ListQuery{States: []State{StateKilled}, Metadata: map[string]string{"team": "a"}}, []string{"killed"}},
		{"template by id", ListQuery{TemplateID: "tmpl-2"}, []string{"run2"}},
		{"template by alias", ListQuery{TemplateID: "base"}, []string{"paused", "run1"}},
		{"unknown template", ListQuery{TemplateID: "nope"}, nil},
		{"startedAfter equal ms is inclusive", ListQuery{StartedAfter: t0.Add(200 * ms)}, []string{"paused", "run2"}},
		{"startedAfter sub-ms bound is compared in ms", ListQuery{StartedAfter: t0.Add(200*ms + 999*time.Microsecond)}, []string{"paused", "run2"}},
		{"startedAfter one second later excludes", ListQuery{StartedAfter: t0.Add(200*ms + time.Second)}, nil},
		{"startedAfter in another zone", ListQuery{StartedAfter: t0.Add(300 * ms).In(time.FixedZone("X", -7*3600))}, []string{"paused"}},
		{"combined", ListQuery{States: []State{StateRunning, StatePaused}, TemplateID: "base", Metadata: map[string]string{"team": "a"}, StartedAfter: t0}, []string{"run1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, next, err := s.ListSandboxes(ctx, tc.q)
			if err != nil {
				t.Fatalf("ListSandboxes: %v", err)
			}
			if next != "" {
				t.Errorf("next token %q on a single page", next)
			}
			if diff := cmp.Diff(tc.want, ids(got)); diff != "" {
				t.Errorf("ids (-want +got):\n%s", diff)
			}
		})
	}
}

func TestListStartedAfterExactNanos(t *testing.T) {
	// A sandbox started at a sub-millisecond instant is included when the
	// bound is that instant truncated to ms, as the SDKs send it.
	s, _ := openTest(t)
	started := t0.Add(1234567 * time.Nanosecond)
	if _, err := s.CreateSandbox(context.Background(), testSandbox("i1", started)); err != nil {
		t.Fatal(err)
	}
	for _, bound := range []time.Time{started, started.Truncate(time.Millisecond)} {
		got, _, err := s.ListSandboxes(context.Background(), ListQuery{StartedAfter: bound})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 {
			t.Errorf("StartedAfter %v: got %v, want [i1]", bound, ids(got))
		}
	}
}

func TestListInvalid(t *testing.T) {
	s := seedList(t)
	ctx := context.Background()
	_, descToken, err := s.ListSandboxes(ctx, ListQuery{Limit: 1})
	if err != nil || descToken == "" {
		t.Fatalf("first page: token %q, err %v", descToken, err)
	}
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	tests := []struct {
		name string
		q    ListQuery
		want error
	}{
		{"garbage token", ListQuery{NextToken: "!!!not base64"}, ErrInvalidToken},
		{"padded base64", ListQuery{NextToken: descToken + "=="}, ErrInvalidToken},
		{"wrong version", ListQuery{NextToken: enc("v0.1.desc.a")}, ErrInvalidToken},
		{"bad time", ListQuery{NextToken: enc("v1.x.desc.a")}, ErrInvalidToken},
		{"bad order", ListQuery{NextToken: enc("v1.1.up.a")}, ErrInvalidToken},
		{"empty id", ListQuery{NextToken: enc("v1.1.desc.")}, ErrInvalidToken},
		{"too few parts", ListQuery{NextToken: enc("v1.1")}, ErrInvalidToken},
		{"desc token with asc order", ListQuery{NextToken: descToken, Order: OrderAsc}, ErrInvalidToken},
		{"unknown order", ListQuery{Order: "sideways"}, ErrInvalid},
		{"unknown state", ListQuery{States: []State{"zombie"}}, ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := s.ListSandboxes(ctx, tc.q); !errors.Is(err, tc.want) {
				t.Errorf("error = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestListTokenSurvivesDeletionOfCursorRow(t *testing.T) {
	// The cursor is a position, not a row reference: deleting the last row
	// of a page does not break the next page.
	s := seedList(t)
	ctx := context.Background()
	page, next, err := s.ListSandboxes(ctx, ListQuery{Limit: 1})
	if err != nil || len(page) != 1 || page[0].ID != "c" {
		t.Fatalf("first page: %v, %v", ids(page), err)
	}
	if err := s.SetState(ctx, "c", StateKilled, ReasonKilled); err != nil {
		t.Fatal(err)
	}
	page, _, err = s.ListSandboxes(ctx, ListQuery{Limit: 1, NextToken: next})
	if err != nil || len(page) != 1 || page[0].ID != "b" {
		t.Errorf("second page: %v, %v; want [b]", ids(page), err)
	}
}
