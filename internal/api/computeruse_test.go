package api

import (
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

func TestComputerUse(t *testing.T) {
	setup := func() *fakeSandboxes {
		paused := running("isb2")
		paused.State = store.StatePaused
		return newFake(running("isb1"), paused)
	}
	const tool = `"tool":{"type":"computer_20250124","name":"computer","display_width_px":1024,"display_height_px":768}`
	const click = `"tool_use":{"type":"tool_use","id":"toolu_1","name":"computer","input":{"action":"left_click","coordinate":[1,2]}}`
	runCases(t, setup, []apiCase{
		{name: "bad action names the field", method: "POST", target: "/sandboxes/isb1/computer-use/anthropic",
			body:   `{` + tool + `,"tool_use":{"type":"tool_use","id":"toolu_1","name":"computer","input":{"action":"left_click","coordinate":[5000,2]}}}`,
			status: 400, wantJSON: `{"code":400,"message":"tool_use.input.coordinate: (5000, 2) is off the 1024x768 display"}`},
		{name: "unknown field names it", method: "POST", target: "/sandboxes/isb1/computer-use/openai",
			body:   `{"tool":{"type":"computer_use_preview","display_width":800,"display_height":600,"environment":"linux"},"computer_call":{},"reasoning":"x"}`,
			status: 400, wantJSON: `{"code":400,"message":"body: json: unknown field \"reasoning\""}`},
		{name: "no body", method: "POST", target: "/sandboxes/isb1/computer-use/openai", status: 400},
		// The fake's sandboxes have no xdotool.
		{name: "no display", method: "POST", target: "/sandboxes/isb1/computer-use/anthropic", body: `{` + tool + `,` + click + `}`, status: 409},
		{name: "paused", method: "POST", target: "/sandboxes/isb2/computer-use/anthropic", body: `{` + tool + `,` + click + `}`,
			status: 409, wantJSON: `{"code":409,"message":"sandbox isb2 is paused: connect to resume it first"}`},
		{name: "unknown sandbox", method: "POST", target: "/sandboxes/nope/computer-use/anthropic", body: `{` + tool + `,` + click + `}`,
			status: 404, wantJSON: notFoundBody},
	})
}

func TestRecordings(t *testing.T) {
	setup := func() *fakeSandboxes {
		paused := running("isb2")
		paused.State = store.StatePaused
		return newFake(running("isb1"), paused)
	}
	runCases(t, setup, []apiCase{
		{name: "bad format names the field", method: "POST", target: "/sandboxes/isb1/recordings", body: `{"format":"gif"}`,
			status: 400, wantJSON: `{"code":400,"message":"format: want mp4 or webm, got \"gif\""}`},
		{name: "bad ID names the field", method: "POST", target: "/sandboxes/isb1/recordings/rec-x/stop",
			status: 400, wantJSON: `{"code":400,"message":"recordingId: \"rec-x\" is not a recording ID"}`},
		// The fake's sandboxes have no sh; a stop that exits 3 is 404,
		// which the recording package's test covers.
		{name: "no display", method: "POST", target: "/sandboxes/isb1/recordings", status: 409},
		{name: "unknown sandbox", method: "POST", target: "/sandboxes/nope/recordings", status: 404, wantJSON: notFoundBody},
		{name: "list of a paused sandbox", method: "GET", target: "/sandboxes/isb2/recordings",
			status: 409, wantJSON: `{"code":409,"message":"sandbox isb2 is paused: connect to resume it first"}`},
		{name: "list of an unknown sandbox", method: "GET", target: "/sandboxes/nope/recordings", status: 404, wantJSON: notFoundBody},
	})
	// A sandbox that has recorded nothing lists empty arrays, not nulls;
	// what the listing holds otherwise is the recording package's test.
	runCases(t, func() *fakeSandboxes {
		f := setup()
		f.execOK = true
		return f
	}, []apiCase{
		{name: "empty list", method: "GET", target: "/sandboxes/isb1/recordings", status: 200, wantJSON: `{"inProgress":[],"files":[]}`,
			check: func(t *testing.T, f *fakeSandboxes) {
				if len(f.execs) != 1 || f.execs[0][0] != "sh" {
					t.Errorf("ran %q; want the listing's sh", f.execs)
				}
			}},
	})
}
