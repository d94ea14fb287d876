package api

import (
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/google/go-cmp/cmp"
)

func TestSandboxLogs(t *testing.T) {
	setup := func() *fakeSandboxes {
		f := newFake(running("isb1"))
		f.logs = []store.SandboxLog{
			{Time: testNow, Level: "info", Logger: "lifecycle", Message: "creating sandbox", Fields: map[string]string{"template": "base"}},
			{Time: testNow.Add(time.Second), Level: "info", Logger: "envd", Message: "process ended", Fields: map[string]string{"pid": "12", "exit_code": "3"}},
		}
		return f
	}
	queried := func(want store.SandboxLogQuery) func(*testing.T, *fakeSandboxes) {
		return func(t *testing.T, f *fakeSandboxes) {
			t.Helper()
			if d := cmp.Diff([]store.SandboxLogQuery{want}, f.logQueries); d != "" {
				t.Errorf("query (-want +got):\n%s", d)
			}
		}
	}
	ms := testNow.UnixMilli()
	runCases(t, setup, []apiCase{
		// As `e2b sandbox logs --follow` polls: from a time in milliseconds.
		{name: "v1", method: "GET", target: "/sandboxes/isb1/logs?start=" + itoa(ms) + "&limit=5", status: 200,
			wantJSON: `{"logs":[
				{"timestamp":"2025-01-02T03:04:05Z","line":"{\"level\":\"info\",\"logger\":\"lifecycle\",\"message\":\"creating sandbox\",\"template\":\"base\"}"},
				{"timestamp":"2025-01-02T03:04:06Z","line":"{\"exit_code\":\"3\",\"level\":\"info\",\"logger\":\"envd\",\"message\":\"process ended\",\"pid\":\"12\"}"}],
				"logEntries":[
				{"timestamp":"2025-01-02T03:04:05Z","level":"info","message":"creating sandbox","fields":{"logger":"lifecycle","template":"base"}},
				{"timestamp":"2025-01-02T03:04:06Z","level":"info","message":"process ended","fields":{"exit_code":"3","logger":"envd","pid":"12"}}]}`,
			check: queried(store.SandboxLogQuery{From: time.UnixMilli(ms).UTC(), Limit: 5})},
		{name: "v1 defaults", method: "GET", target: "/sandboxes/isb1/logs", status: 200,
			check: queried(store.SandboxLogQuery{Limit: defaultLogLimit})},
		{name: "v2", method: "GET", target: "/v2/sandboxes/isb1/logs?cursor=" + itoa(ms) + "&direction=backward&level=warn&search=died&limit=2", status: 200,
			check: queried(store.SandboxLogQuery{From: time.UnixMilli(ms).UTC(), Backward: true, MinLevel: "warn", Search: "died", Limit: 2})},
		{name: "v2 shape", method: "GET", target: "/v2/sandboxes/isb1/logs?limit=1", status: 200,
			wantJSON: `{"logs":[
				{"timestamp":"2025-01-02T03:04:05Z","level":"info","message":"creating sandbox","fields":{"logger":"lifecycle","template":"base"}},
				{"timestamp":"2025-01-02T03:04:06Z","level":"info","message":"process ended","fields":{"exit_code":"3","logger":"envd","pid":"12"}}]}`},
		{name: "bad start", method: "GET", target: "/sandboxes/isb1/logs?start=yesterday", status: 400},
		{name: "bad limit", method: "GET", target: "/sandboxes/isb1/logs?limit=-1", status: 400},
		{name: "bad direction", method: "GET", target: "/v2/sandboxes/isb1/logs?direction=sideways", status: 400},
		{name: "unknown", method: "GET", target: "/sandboxes/nope/logs", status: 404, wantJSON: notFoundBody},
	})
}
