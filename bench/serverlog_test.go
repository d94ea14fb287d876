package bench

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseLogLine(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       logEntry
	}{
		{"bare and quoted",
			`time=2026-12-04T10:00:00.000Z level=DEBUG msg="sandbox restored" sandbox_id=abc load=120.5ms identity=31ms`,
			logEntry{"time": "2026-12-04T10:00:00.000Z", "level": "DEBUG", "msg": "sandbox restored", "sandbox_id": "abc", "load": "120.5ms", "identity": "31ms"}},
		{"escapes in a quoted value",
			`level=WARN msg="making a memory snapshot failed" err="qmp: \"migrate\" failed"`,
			logEntry{"level": "WARN", "msg": "making a memory snapshot failed", "err": `qmp: "migrate" failed`}},
		{"not key=value", "panic: runtime error", logEntry{}},
		{"stops at a broken quote", `msg="half level=INFO`, logEntry{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, parseLogLine(tc.line)); diff != "" {
				t.Errorf("parseLogLine (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadLogFromOffset(t *testing.T) {
	path := filepath.Join(t.TempDir(), "server.log")
	before := "level=INFO msg=\"creating sandbox\" sandbox_id=a\n"
	after := "level=DEBUG msg=\"sandbox running: steps\" before_init=300ms init=5ms\n" +
		"level=DEBUG msg=\"sandbox running: steps\" before_init=100ms init=7ms\n" +
		"level=INFO msg=\"creating sandbox\" sandbox_id=b\n" +
		"level=DEBUG msg=\"sandbox running: steps\" before_init=200ms" // still being written
	if err := os.WriteFile(path, []byte(before+after), 0o600); err != nil {
		t.Fatal(err)
	}
	log, err := readLog(path, int64(len(before)))
	if err != nil {
		t.Fatal(err)
	}
	if got := len(log.with("creating sandbox", nil)); got != 1 {
		t.Errorf("%d creates after the offset, want 1", got)
	}
	steps := log.with("sandbox running: steps", nil)
	if got, want := steps.p50s("before_init", "init", "record"), "before_init 100 ms, init 5.00 ms"; got != want {
		t.Errorf("p50s = %q, want %q", got, want)
	}
}
