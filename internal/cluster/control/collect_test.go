package control

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agent-sandbox/agent-sandbox/internal/cluster/v1alpha1"
)

// TestChoose: an ended object goes a retention after its status was last
// written (once); a live one past its end by the grace, or never started within
// a create's longest wait, is marked Killed; anything else stays.
func TestChoose(t *testing.T) {
	now := time.Date(2026, 12, 6, 2, 0, 0, 0, time.UTC)
	const retention = time.Hour
	obj := func(state v1alpha1.SandboxState, created, started, statusAt time.Duration, timeout time.Duration) *v1alpha1.Sandbox {
		o := &v1alpha1.Sandbox{
			ObjectMeta: metav1.ObjectMeta{Name: "s", CreationTimestamp: metav1.NewTime(now.Add(-created))},
			Spec:       v1alpha1.SandboxSpec{Node: "n1", Timeout: metav1.Duration{Duration: timeout}},
			Status:     v1alpha1.SandboxStatus{State: state},
		}
		if started >= 0 {
			o.Status.StartedAt = new(metav1.NewTime(now.Add(-started)))
		}
		if statusAt >= 0 {
			at := metav1.NewTime(now.Add(-statusAt))
			o.ManagedFields = []metav1.ManagedFieldsEntry{
				{Manager: "node", Subresource: "status", Time: new(metav1.NewTime(now.Add(-2 * time.Hour)))},
				{Manager: "leader", Subresource: "status", Time: &at},
				{Manager: "replica", Time: new(metav1.NewTime(now))}, // the spec's: not the status
			}
		}
		return o
	}
	const none = -1
	deleting := obj(v1alpha1.SandboxKilled, 3*time.Hour, 3*time.Hour, retention, time.Minute)
	deleting.DeletionTimestamp = new(metav1.NewTime(now.Add(-time.Minute)))
	for _, tc := range []struct {
		name   string
		o      *v1alpha1.Sandbox
		want   chore
		reason string
	}{
		{"killed a retention ago", obj(v1alpha1.SandboxKilled, 3*time.Hour, 3*time.Hour, retention, time.Minute), collect, ""},
		{"lost just now", obj(v1alpha1.SandboxLost, 3*time.Hour, 3*time.Hour, time.Second, 5*time.Hour), keep, ""},
		{"error, no status time: its creation", obj(v1alpha1.SandboxError, 2*time.Hour, none, none, time.Minute), collect, ""},
		{"running within its timeout", obj(v1alpha1.SandboxRunning, 10*time.Minute, 10*time.Minute, 10*time.Minute, time.Hour), keep, ""},
		{"running past its end, within the grace", obj(v1alpha1.SandboxRunning, 10*time.Minute, 10*time.Minute, 10*time.Minute, 9*time.Minute+30*time.Second), keep, ""},
		{"running past its end and the grace", obj(v1alpha1.SandboxRunning, 10*time.Minute, 10*time.Minute, 10*time.Minute, 9*time.Minute), expire, "timed out at 2026-12-06T01:59:00Z; node n1 did not report it"},
		{"paused past its end: its node's paused retention applies", obj(v1alpha1.SandboxPaused, 10*time.Minute, 10*time.Minute, 10*time.Minute, time.Minute), keep, ""},
		{"pending within a create's wait", obj("", MaxStart, none, none, time.Second), keep, ""},
		{"killed a retention ago, being deleted: its finalizer's holder completes it", deleting, keep, ""},
		{"pending past a create's wait", obj(v1alpha1.SandboxPending, MaxStart+OverdueGrace, none, none, time.Hour), expire, "not started by node n1 within 10m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, reason := choose(tc.o, now, retention)
			if got != tc.want || !strings.Contains(reason, tc.reason) || (tc.reason == "") != (reason == "") {
				t.Fatalf("choose = %d %q, want %d %q", got, reason, tc.want, tc.reason)
			}
		})
	}
}
