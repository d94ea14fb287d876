package replica

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/cluster/v1alpha1"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

var t0 = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)

// object is Sandbox name of template, started at t0 plus start seconds,
// in state, with metadata md, and a timeout that has not passed.
func object(name, template string, start int, state v1alpha1.SandboxState, md map[string]string) *v1alpha1.Sandbox {
	started := metav1.NewTime(t0.Add(time.Duration(start) * time.Second))
	return &v1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: started},
		Spec:       v1alpha1.SandboxSpec{Template: template, Timeout: metav1.Duration{Duration: 100 * 365 * 24 * time.Hour}, Metadata: md},
		Status:     v1alpha1.SandboxStatus{State: state, StartedAt: &started},
	}
}

func TestList(t *testing.T) {
	const running, paused, killed, lost = v1alpha1.SandboxRunning, v1alpha1.SandboxPaused, v1alpha1.SandboxKilled, v1alpha1.SandboxLost
	objs := []*v1alpha1.Sandbox{
		object("a", "base", 1, running, map[string]string{"team": "x"}),
		object("b", "desktop", 2, paused, nil),
		object("c", "base", 3, killed, nil),
		object("d", "base", 4, running, map[string]string{"team": "y"}),
		object("e", "base", 4, lost, nil),
		object("f", "base", 5, "", nil), // written, not started
	}
	ids := func(sbs []store.Sandbox) []string {
		var out []string
		for _, sb := range sbs {
			out = append(out, sb.ID)
		}
		return out
	}
	tests := []struct {
		name string
		q    store.ListQuery
		want []string
	}{
		{"running and paused, newest first", store.ListQuery{}, []string{"d", "b", "a"}},
		{"oldest first", store.ListQuery{Order: store.OrderAsc}, []string{"a", "b", "d"}},
		{"ended ones when asked", store.ListQuery{States: []store.State{store.StateKilled, store.StateError}}, []string{"e", "c"}},
		{"by metadata", store.ListQuery{Metadata: map[string]string{"team": "y"}}, []string{"d"}},
		{"by template", store.ListQuery{TemplateID: "desktop"}, []string{"b"}},
		{"started after", store.ListQuery{StartedAfter: t0.Add(2 * time.Second)}, []string{"d", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, next, err := list(objs, tt.q)
			if err != nil || next != "" || !slices.Equal(ids(got), tt.want) {
				t.Fatalf("list = %v, %q, %v; want %v", ids(got), next, err, tt.want)
			}
		})
	}

	t.Run("pages", func(t *testing.T) {
		q := store.ListQuery{Limit: 1, States: []store.State{store.StateRunning, store.StatePaused, store.StateKilled, store.StateError}}
		var all []string
		for range 10 {
			page, next, err := list(objs, q)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, ids(page)...)
			if next == "" {
				break
			}
			q.NextToken = next
		}
		// e and d started at once: by ID, descending.
		if want := []string{"e", "d", "c", "b", "a"}; !slices.Equal(all, want) {
			t.Errorf("paged through %v, want %v", all, want)
		}
	})
	t.Run("a bad token", func(t *testing.T) {
		if _, _, err := list(objs, store.ListQuery{NextToken: "!!"}); !errors.Is(err, store.ErrInvalidToken) {
			t.Errorf("list with a bad token: %v, want ErrInvalidToken", err)
		}
	})
}

func TestKeys(t *testing.T) {
	if _, err := NewKeys(); err == nil {
		t.Error("NewKeys with no key: no error")
	}
	const key = "e2b_0123456789abcdef0123456789abcdef01234567"
	k, err := NewKeys(key)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := k.VerifyAPIKey(t.Context(), key); err != nil || got.Masked() != "e2b_01...4567" {
		t.Errorf("the key given: %+v, %v", got, err)
	}
	if _, err := k.VerifyAPIKey(t.Context(), key[:len(key)-1]+"8"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("another key: %v, want store.ErrNotFound", err)
	}
}

// TestCreateChecks: a replica refuses before any write what cluster mode
// cannot do yet, and what no node would take in the single host's words
// (sandbox.CheckRequest); env vars and network configs pass to the node.
func TestCreateChecks(t *testing.T) {
	off := false
	for _, tc := range []struct {
		name string
		req  sandbox.CreateRequest
		want string // "": accepted
	}{
		{"env vars and network", sandbox.CreateRequest{EnvVars: map[string]string{"A": "b"}, AllowInternetAccess: &off,
			Network: []byte(`{"allowPublicTraffic":false,"maskRequestHost":"localhost:${PORT}","allowOut":["1.1.1.1"],"denyOut":["0.0.0.0/0"]}`)}, ""},
		{"auto-pause", sandbox.CreateRequest{AutoPause: true}, "autoPause is not supported in cluster mode yet"},
		{"volumes", sandbox.CreateRequest{VolumeMounts: []store.VolumeMount{{Name: "v", Path: "/data"}}}, "volumeMounts are not supported in cluster mode yet"},
		{"network not JSON", sandbox.CreateRequest{Network: []byte(`{`)}, "network config is not valid JSON"},
		{"bad allowOut", sandbox.CreateRequest{Network: []byte(`{"allowOut":["not a host!"]}`)}, "network.allowOut"},
		{"egress proxy", sandbox.CreateRequest{Network: []byte(`{"egressProxy":{"url":"socks5://x"}}`)}, "network.egressProxy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := supported(tc.req)
			if err == nil {
				err = sandbox.CheckRequest(tc.req)
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want == "":
			case err == nil:
				t.Fatalf("accepted, want %q", tc.want)
			case !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), tc.want):
				t.Fatalf("refused with %v, want an ErrInvalid saying %q", err, tc.want)
			}
		})
	}
}

// A Running object past its end, whose node has not reported the kill yet,
// is a timed-out sandbox, as on a single host: get does not find it and
// list shows it killed.
func TestOverdue(t *testing.T) {
	o := object("late", "base", 0, v1alpha1.SandboxRunning, nil)
	o.Spec.Timeout.Duration = time.Minute
	if sb := view(o); sb.State != store.StateKilled || sb.Reason != store.ReasonTimeout || !sb.EndAt.Equal(t0.Add(time.Minute)) {
		t.Errorf("view of an overdue object = %s (%s), end %s; want killed by its timeout at %s", sb.State, sb.Reason, sb.EndAt, t0.Add(time.Minute))
	}
	got, _, err := list([]*v1alpha1.Sandbox{o}, store.ListQuery{})
	if err != nil || len(got) != 0 {
		t.Errorf("list of running and paused = %v, %v; want none", got, err)
	}
	if overdue(o, t0.Add(59*time.Second)) || !overdue(o, t0.Add(61*time.Second)) {
		t.Error("overdue does not turn at the object's end")
	}
	o.Status.State = v1alpha1.SandboxPaused
	if overdue(o, t0.Add(time.Hour)) {
		t.Error("a paused sandbox's timeout does not run; it is not overdue")
	}
}

// The node's template ID and name are the sandbox's, and either finds it
// in a list by template.
func TestViewTemplate(t *testing.T) {
	o := object("n", "base", 0, v1alpha1.SandboxRunning, nil)
	o.Status.TemplateID, o.Status.Alias, o.Status.CPUCount = "base-1a2b3c", "base", 2
	if sb := view(o); sb.TemplateID != "base-1a2b3c" || sb.Alias != "base" || sb.CPUCount != 2 {
		t.Errorf("view = template %q alias %q cpus %d; want the node's base-1a2b3c, base, 2", sb.TemplateID, sb.Alias, sb.CPUCount)
	}
	for _, q := range []string{"base-1a2b3c", "base"} {
		if got, _, _ := list([]*v1alpha1.Sandbox{o}, store.ListQuery{TemplateID: q}); len(got) != 1 {
			t.Errorf("list by template %q = %v; want the sandbox", q, got)
		}
	}
}
