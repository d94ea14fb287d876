package api

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

func running(id string) store.Sandbox {
	return store.Sandbox{
		ID: id, TemplateID: "tpl1", Alias: "base", State: store.StateRunning,
		StartedAt: testNow, EndAt: testNow.Add(5 * time.Minute),
		CPUCount: 2, MemoryMB: 512, DiskSizeMB: 1024,
		EnvdAccessToken: "tok-" + id,
	}
}

func paused(id string) store.Sandbox {
	sb := running(id)
	sb.State = store.StatePaused
	return sb
}

func fakeWith(sbs ...store.Sandbox) func() *fakeSandboxes {
	return func() *fakeSandboxes { return newFake(sbs...) }
}

func timeouts(id string, want ...time.Duration) func(*testing.T, *fakeSandboxes) {
	return func(t *testing.T, f *fakeSandboxes) {
		t.Helper()
		if d := cmp.Diff(want, f.timeouts[id]); d != "" {
			t.Errorf("timeouts of %s (-want +got):\n%s", id, d)
		}
	}
}

const notFoundBody = `{"code":404,"message":"sandbox \"nope\" doesn't exist or you don't have access to it"}`

func TestConnect(t *testing.T) {
	sbJSON := `{"sandboxID":"isb1","templateID":"tpl1","alias":"base","clientID":"6532622b","envdVersion":"0.6.4",
		"envdAccessToken":"tok-isb1","trafficAccessToken":null,"domain":"example.test"}`
	runCases(t, fakeWith(running("isb1"), paused("isp1")), []apiCase{
		{name: "v1 running", method: "POST", target: "/sandboxes/isb1/connect", body: `{"timeout":60}`,
			status: 200, wantJSON: sbJSON, check: timeouts("isb1", time.Minute)},
		{name: "v1 paused resumes", method: "POST", target: "/sandboxes/isp1/connect", body: `{"timeout":60}`,
			status: 201},
		{name: "v1 body required", method: "POST", target: "/sandboxes/isb1/connect", status: 400},
		{name: "v1 timeout required", method: "POST", target: "/sandboxes/isb1/connect", body: `{}`,
			status: 400, wantJSON: `{"code":400,"message":"timeout is required"}`},
		{name: "v2 no body", method: "POST", target: "/v2/sandboxes/isb1/connect",
			status: 200, wantJSON: sbJSON, check: timeouts("isb1", 300*time.Second)},
		{name: "v2 empty object", method: "POST", target: "/v2/sandboxes/isb1/connect", body: `{}`,
			status: 200, check: timeouts("isb1", 300*time.Second)},
		{name: "v2 timeout and memory", method: "POST", target: "/v2/sandboxes/isp1/connect", body: `{"timeout":60,"memory":true}`,
			status: 201, check: timeouts("isp1", time.Minute)},
		{name: "v2 reboot", method: "POST", target: "/v2/sandboxes/isp1/connect", body: `{"timeout":60,"memory":false}`,
			status: 201, check: func(t *testing.T, f *fakeSandboxes) {
				if d := cmp.Diff([]bool{true}, f.reboots); d != "" {
					t.Errorf("reboots (-want +got):\n%s", d)
				}
			}},
		{name: "v2 timeout 0", method: "POST", target: "/v2/sandboxes/isb1/connect", body: `{"timeout":0}`,
			status: 400, check: timeouts("isb1")},
		{name: "v2 malformed", method: "POST", target: "/v2/sandboxes/isb1/connect", body: `{"timeout":`, status: 400},
		{name: "v2 unknown", method: "POST", target: "/v2/sandboxes/nope/connect", status: 404, wantJSON: notFoundBody},
		{name: "v1 unknown", method: "POST", target: "/sandboxes/nope/connect", body: `{"timeout":5}`, status: 404, wantJSON: notFoundBody},
	})
}

func TestGetInfo(t *testing.T) {
	yes := true
	full := running("isb1")
	full.Metadata = map[string]string{"k": "v"}
	full.AllowInternetAccess = &yes
	full.AutoPause = true
	full.Network = []byte(`{"allowOut":["a.com"],"egressProxy":{"address":"p:1080","username":"u","password":"secret"}}`)
	runCases(t, fakeWith(full, paused("isp1")), []apiCase{
		{name: "running with everything", method: "GET", target: "/sandboxes/isb1", status: 200,
			wantJSON: `{"sandboxID":"isb1","templateID":"tpl1","alias":"base","clientID":"6532622b",
				"startedAt":"2025-01-02T03:04:05Z","endAt":"2025-01-02T03:09:05Z","envdVersion":"0.6.4",
				"envdAccessToken":"tok-isb1","allowInternetAccess":true,"domain":"example.test",
				"cpuCount":2,"memoryMB":512,"diskSizeMB":1024,"metadata":{"k":"v"},"state":"running",
				"network":{"allowOut":["a.com"],"egressProxy":{"address":"p:1080","username":"u"}},
				"lifecycle":{"onTimeout":"pause","autoResume":false}}`},
		{name: "paused minimal", method: "GET", target: "/sandboxes/isp1", status: 200,
			wantJSON: `{"sandboxID":"isp1","templateID":"tpl1","alias":"base","clientID":"6532622b",
				"startedAt":"2025-01-02T03:04:05Z","endAt":"2025-01-02T03:09:05Z","envdVersion":"0.6.4",
				"envdAccessToken":"tok-isp1","allowInternetAccess":null,"domain":"example.test",
				"cpuCount":2,"memoryMB":512,"diskSizeMB":1024,"state":"paused",
				"lifecycle":{"onTimeout":"kill","autoResume":false}}`},
		{name: "unknown", method: "GET", target: "/sandboxes/nope", status: 404, wantJSON: notFoundBody},
	})
}

func TestKillTimeoutPause(t *testing.T) {
	runCases(t, fakeWith(running("isb1"), paused("isp1")), []apiCase{
		{name: "kill", method: "DELETE", target: "/sandboxes/isb1", status: 204, wantEmpty: true,
			check: func(t *testing.T, f *fakeSandboxes) {
				if _, ok := f.sbs["isb1"]; ok {
					t.Error("not killed")
				}
			}},
		// The SDK's kill() returns false only when the JSON code is 404.
		{name: "kill unknown", method: "DELETE", target: "/sandboxes/nope", status: 404, wantJSON: notFoundBody},

		{name: "timeout", method: "POST", target: "/sandboxes/isb1/timeout", body: `{"timeout":5}`,
			status: 204, wantEmpty: true, check: timeouts("isb1", 5*time.Second)},
		{name: "timeout missing", method: "POST", target: "/sandboxes/isb1/timeout", body: `{}`, status: 400},
		{name: "timeout no body", method: "POST", target: "/sandboxes/isb1/timeout", status: 400},
		{name: "timeout negative", method: "POST", target: "/sandboxes/isb1/timeout", body: `{"timeout":-1}`, status: 400},
		{name: "timeout over max", method: "POST", target: "/sandboxes/isb1/timeout", body: `{"timeout":90000}`,
			status: 400, wantJSON: `{"code":400,"message":"timeout cannot be greater than 24 hours: invalid request"}`},
		{name: "timeout unknown", method: "POST", target: "/sandboxes/nope/timeout", body: `{"timeout":5}`,
			status: 404, wantJSON: notFoundBody},

		{name: "refresh", method: "POST", target: "/sandboxes/isb1/refreshes", body: `{"duration":60}`,
			status: 204, check: timeouts("isb1", time.Minute)},
		{name: "refresh default", method: "POST", target: "/sandboxes/isb1/refreshes",
			status: 204, check: timeouts("isb1", 15*time.Second)},
		{name: "refresh zero", method: "POST", target: "/sandboxes/isb1/refreshes", body: `{"duration":0}`,
			status: 204, check: timeouts("isb1")},
		{name: "refresh too long", method: "POST", target: "/sandboxes/isb1/refreshes", body: `{"duration":3601}`,
			status: 400, wantJSON: `{"code":400,"message":"duration must be between 0 and 3600 seconds, got 3601"}`},
		{name: "refresh paused", method: "POST", target: "/sandboxes/isp1/refreshes", body: `{"duration":60}`,
			status: 409, check: func(t *testing.T, f *fakeSandboxes) {
				if f.sbs["isp1"].State != store.StatePaused {
					t.Error("refresh resumed a paused sandbox")
				}
			}},
		{name: "refresh unknown", method: "POST", target: "/sandboxes/nope/refreshes", body: `{"duration":60}`,
			status: 404, wantJSON: notFoundBody},

		{name: "pause", method: "POST", target: "/sandboxes/isb1/pause", status: 204, wantEmpty: true,
			check: func(t *testing.T, f *fakeSandboxes) {
				if f.sbs["isb1"].State != store.StatePaused {
					t.Error("not paused")
				}
			}},
		{name: "pause with body", method: "POST", target: "/sandboxes/isb1/pause", body: `{"memory":true}`, status: 204,
			check: pauses(true)},
		{name: "pause without memory", method: "POST", target: "/sandboxes/isb1/pause", body: `{"memory":false}`, status: 204,
			check: pauses(false)},
		{name: "pause keeps memory by default", method: "POST", target: "/sandboxes/isb1/pause", body: `{}`, status: 204,
			check: pauses(true)},
		{name: "pause paused", method: "POST", target: "/sandboxes/isp1/pause", body: `{}`,
			status: 409, wantJSON: `{"code":409,"message":"sandbox isp1 is already paused: sandbox is in the wrong state"}`},
		{name: "pause unknown", method: "POST", target: "/sandboxes/nope/pause", status: 404, wantJSON: notFoundBody},
	})
}

func TestMetrics(t *testing.T) {
	setup := func() *fakeSandboxes {
		f := newFake(running("isb1"))
		for i := range 3 {
			f.metrics = append(f.metrics, sandbox.Metric{
				Timestamp: testNow.Add(time.Duration(i) * 5 * time.Second), CPUCount: 2, CPUUsedPct: 12.5,
				MemUsed: 100, MemTotal: 512 << 20, MemCache: 7, DiskUsed: 1000, DiskTotal: 1 << 30,
			})
		}
		return f
	}
	window := func(start, end time.Time) func(*testing.T, *fakeSandboxes) {
		return func(t *testing.T, f *fakeSandboxes) {
			t.Helper()
			if d := cmp.Diff([][2]time.Time{{start, end}}, f.metricWindows); d != "" {
				t.Errorf("window (-want +got):\n%s", d)
			}
		}
	}
	start := testNow.Unix()
	runCases(t, setup, []apiCase{
		{name: "defaults", method: "GET", target: "/sandboxes/isb1/metrics", status: 200,
			check: window(testNow, testNow.Add(time.Hour))},
		{name: "window", method: "GET", target: "/sandboxes/isb1/metrics?start=" + itoa(start+5) + "&end=" + itoa(start+5),
			status: 200,
			wantJSON: `[{"timestamp":"2025-01-02T03:04:10Z","timestampUnix":` + itoa(start+5) + `,"cpuCount":2,
				"cpuUsedPct":12.5,"memUsed":100,"memTotal":536870912,"memCache":7,"diskUsed":1000,"diskTotal":1073741824}]`},
		{name: "before the sandbox", method: "GET", target: "/sandboxes/isb1/metrics?start=1000&end=2000",
			status: 200, wantJSON: `[]`},
		{name: "bad start", method: "GET", target: "/sandboxes/isb1/metrics?start=yesterday", status: 400},
		{name: "end before start", method: "GET", target: "/sandboxes/isb1/metrics?start=2000&end=1000", status: 400},
		{name: "unknown", method: "GET", target: "/sandboxes/nope/metrics", status: 404, wantJSON: notFoundBody},
		{name: "unknown with window", method: "GET", target: "/sandboxes/nope/metrics?start=1&end=2", status: 404},
	})
}

func TestGetInfoOfEndedSandboxNamesTheReason(t *testing.T) {
	f := newFake()
	f.fail = fmt.Errorf("getting inope: %w", &sandbox.EndedError{ID: "inope", At: testNow, Reason: "timeout"})
	res := serve(newHandler(t, f), apiCase{method: "GET", target: "/sandboxes/inope"})
	want := `{"code":404,"message":"sandbox \"inope\" doesn't exist or you don't have access to it (it ended at 2025-01-02T03:04:05Z: timeout)"}`
	if res.Code != 404 || strings.TrimSpace(res.Body.String()) != want {
		t.Errorf("got %d %s\nwant 404 %s", res.Code, res.Body, want)
	}
}

// A key's own timeout limit holds on create, connect and setTimeout, with
// the limit in the message, whatever the server's.
func TestKeyTimeoutLimit(t *testing.T) {
	limited, _, err := keys.CreateAPIKey(context.Background(), "one hour", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	const tooLong = `{"code":400,"message":"Timeout cannot be greater than 1 hours (this API key's limit)"}`
	key := map[string]string{"X-API-Key": limited}
	const runningID = "isb1"
	h := newHandler(t, newFake(running(runningID)))
	for _, c := range []apiCase{
		{name: "create beyond", method: "POST", target: "/v2/sandboxes", body: `{"templateID":"base","timeout":3601}`, header: key, status: 400, wantJSON: tooLong},
		{name: "create within", method: "POST", target: "/v2/sandboxes", body: `{"templateID":"base","timeout":3600}`, header: key, status: 201},
		{name: "connect beyond", method: "POST", target: "/sandboxes/" + runningID + "/connect", body: `{"timeout":7200}`, header: key, status: 400, wantJSON: tooLong},
		{name: "setTimeout beyond", method: "POST", target: "/sandboxes/" + runningID + "/timeout", body: `{"timeout":7200}`, header: key, status: 400, wantJSON: tooLong},
		{name: "another key is not held to it", method: "POST", target: "/sandboxes/" + runningID + "/timeout", body: `{"timeout":7200}`, status: 204},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := serve(h, c)
			if w.Code != c.status {
				t.Fatalf("status %d, want %d; body %s", w.Code, c.status, w.Body)
			}
			if c.wantJSON != "" {
				assertJSON(t, w.Body.Bytes(), c.wantJSON)
			}
		})
	}
}

func pauses(want ...bool) func(*testing.T, *fakeSandboxes) {
	return func(t *testing.T, f *fakeSandboxes) {
		t.Helper()
		if d := cmp.Diff(want, f.pauses); d != "" {
			t.Errorf("pauses' keepMemory (-want +got):\n%s", d)
		}
	}
}
