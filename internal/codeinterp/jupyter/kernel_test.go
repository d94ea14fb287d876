package jupyter

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
	"github.com/google/go-cmp/cmp"
)

// python is Debian's interpreter, which has python3-ipykernel; the first
// python3 on PATH may be another one without it.
const python = "/usr/bin/python3"

// ipykernelMissing says why python cannot run ipykernel, if it cannot.
var ipykernelMissing = sync.OnceValue(func() string {
	out, err := exec.Command(python, "-c", "import ipykernel").CombinedOutput()
	if err == nil {
		return ""
	}
	return python + " cannot import ipykernel (install python3-ipykernel): " + err.Error() + ": " + strings.TrimSpace(string(out))
})

// requireIPyKernel skips t unless python can import ipykernel; under CI
// (CI=true) it fails instead, so the suite cannot pass by skipping.
func requireIPyKernel(t *testing.T) {
	t.Helper()
	reason := ipykernelMissing()
	testenv.Require(t, reason == "", reason)
}

func startKernel(t *testing.T) *Kernel {
	t.Helper()
	requireIPyKernel(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	k, err := Start(ctx, KernelSpec{
		Argv:   []string{python, "-m", "ipykernel_launcher", "-f", "{connection_file}"},
		Dir:    t.TempDir(),
		Output: t.Output(),
		Log:    slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := k.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return k
}

// run executes code and returns the reply and the iopub messages.
func run(t *testing.T, k *Kernel, code string) (Reply, []Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var msgs []Message
	reply, err := k.Execute(ctx, code, func(m Message) { msgs = append(msgs, m) })
	if err != nil {
		t.Fatalf("Execute(%q): %v", code, err)
	}
	return reply, msgs
}

// content decodes the content of the first message of type msgType.
func content(t *testing.T, msgs []Message, msgType string) map[string]any {
	t.Helper()
	for _, m := range msgs {
		if m.Header.MsgType == msgType {
			var c map[string]any
			if err := json.Unmarshal(m.Content, &c); err != nil {
				t.Fatalf("decoding %s: %v", msgType, err)
			}
			return c
		}
	}
	t.Fatalf("no %s among %v", msgType, types(msgs))
	return nil
}

func types(msgs []Message) []string {
	var ts []string
	for _, m := range msgs {
		ts = append(ts, m.Header.MsgType)
	}
	return ts
}

// textPlain returns data["text/plain"] of a display_data or execute_result.
func textPlain(c map[string]any) any {
	data, _ := c["data"].(map[string]any)
	return data["text/plain"]
}

// TestExecute runs its cases in order on one kernel: they share its state
// and execution count.
func TestExecute(t *testing.T) {
	k := startKernel(t)

	t.Run("expression", func(t *testing.T) {
		reply, msgs := run(t, k, "1+1")
		if diff := cmp.Diff([]string{"execute_input", "execute_result"}, types(msgs)); diff != "" {
			t.Errorf("message types (-want +got):\n%s", diff)
		}
		if got := content(t, msgs, "execute_input")["execution_count"]; got != 1.0 {
			t.Errorf("execute_input execution_count = %v, want 1", got)
		}
		if got := textPlain(content(t, msgs, "execute_result")); got != "2" {
			t.Errorf("execute_result text/plain = %v, want 2", got)
		}
		if diff := cmp.Diff(Reply{Status: "ok", ExecutionCount: 1}, reply); diff != "" {
			t.Errorf("reply (-want +got):\n%s", diff)
		}
	})

	t.Run("silent does not count", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		reply, err := k.Silent(ctx, "import os; os.environ['JUPYTER_TEST'] = 'set'")
		if err != nil || reply.Status != "ok" {
			t.Fatalf("Silent = %+v, %v; want status ok", reply, err)
		}
		reply, msgs := run(t, k, "os.environ['JUPYTER_TEST']")
		if reply.ExecutionCount != 2 {
			t.Errorf("execution count after Silent = %d, want 2", reply.ExecutionCount)
		}
		if got := textPlain(content(t, msgs, "execute_result")); got != "'set'" {
			t.Errorf("result = %v, want 'set'", got)
		}
	})

	t.Run("state persists", func(t *testing.T) {
		run(t, k, "x = 5")
		_, msgs := run(t, k, "x * 2")
		if got := textPlain(content(t, msgs, "execute_result")); got != "10" {
			t.Errorf("x * 2 = %v, want 10", got)
		}
	})

	t.Run("streams in order", func(t *testing.T) {
		_, msgs := run(t, k, "import sys\n"+
			"print('a', flush=True)\n"+
			"print('b', file=sys.stderr, flush=True)\n"+
			"print('c', flush=True)")
		var got []string
		for _, m := range msgs {
			switch m.Header.MsgType {
			case "execute_input":
				continue
			case "stream":
			default:
				t.Errorf("unexpected %s", m.Header.MsgType)
				continue
			}
			var c struct{ Name, Text string }
			if err := json.Unmarshal(m.Content, &c); err != nil {
				t.Fatal(err)
			}
			got = append(got, c.Name+":"+c.Text)
		}
		if diff := cmp.Diff([]string{"stdout:a\n", "stderr:b\n", "stdout:c\n"}, got); diff != "" {
			t.Errorf("streams (-want +got):\n%s", diff)
		}
	})

	t.Run("exception", func(t *testing.T) {
		reply, msgs := run(t, k, "1/0")
		c := content(t, msgs, "error")
		if c["ename"] != "ZeroDivisionError" || c["evalue"] != "division by zero" {
			t.Errorf("error = %v: %v, want ZeroDivisionError: division by zero", c["ename"], c["evalue"])
		}
		if tb, _ := c["traceback"].([]any); len(tb) == 0 {
			t.Errorf("error has no traceback")
		}
		if reply.Status != "error" || reply.EName != "ZeroDivisionError" || len(reply.Traceback) == 0 {
			t.Errorf("reply = %+v, want status error with ZeroDivisionError and a traceback", reply)
		}
	})

	t.Run("display", func(t *testing.T) {
		_, msgs := run(t, k, "from IPython.display import HTML, display\ndisplay(HTML('<b>hi</b>'))")
		data, _ := content(t, msgs, "display_data")["data"].(map[string]any)
		if data["text/html"] != "<b>hi</b>" {
			t.Errorf("display_data data = %v, want text/html <b>hi</b>", data)
		}
	})

	t.Run("concurrent executions serialize", func(t *testing.T) {
		counts := make(chan int, 2)
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				reply, err := k.Execute(t.Context(), "import time; time.sleep(0.2)", nil)
				if err != nil || reply.Status != "ok" {
					t.Errorf("Execute = %+v, %v; want status ok", reply, err)
				}
				counts <- reply.ExecutionCount
			})
		}
		wg.Wait()
		if a, b := <-counts, <-counts; a == b {
			t.Errorf("both executions have count %d", a)
		}
	})

	t.Run("timeout interrupts", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		begin := time.Now()
		_, err := k.Execute(ctx, "import time; time.sleep(30)", nil)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Execute = %v, want context.DeadlineExceeded", err)
		}
		if d := time.Since(begin); d > 5*time.Second {
			t.Errorf("Execute took %s after its deadline of 1s", d)
		}
		reply, msgs := run(t, k, "'alive'")
		if reply.Status != "ok" || textPlain(content(t, msgs, "execute_result")) != "'alive'" {
			t.Errorf("next Execute = %+v %v, want ok 'alive'", reply, types(msgs))
		}
	})
}

func TestKernelDies(t *testing.T) {
	k := startKernel(t)
	started := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		_, err := k.Execute(t.Context(), "import time; time.sleep(30)", func(m Message) {
			if m.Header.MsgType == "execute_input" {
				close(started)
			}
		})
		errc <- err
	}()
	<-started
	if err := k.cmd.Process.Kill(); err != nil { // SIGKILL, to the kernel alone
		t.Fatal(err)
	}
	select {
	case <-k.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed 5s after SIGKILL")
	}
	select {
	case err := <-errc:
		if !errors.Is(err, ErrDied) {
			t.Errorf("Execute in flight = %v, want ErrDied", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Execute in flight did not return 5s after the kernel died")
	}
	if _, err := k.Execute(t.Context(), "1", nil); !errors.Is(err, ErrDied) {
		t.Errorf("Execute after death = %v, want ErrDied", err)
	}
	if err := k.Interrupt(); !errors.Is(err, ErrDied) {
		t.Errorf("Interrupt after death = %v, want ErrDied", err)
	}
}

func TestClose(t *testing.T) {
	k := startKernel(t)
	// A process the code leaves behind must go with the kernel's group.
	_, msgs := run(t, k, "import subprocess; subprocess.Popen(['sleep', '60']).pid")
	child, err := strconv.Atoi(textPlain(content(t, msgs, "execute_result")).(string))
	if err != nil {
		t.Fatal(err)
	}
	pid := k.cmd.Process.Pid

	begin := time.Now()
	if err := k.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	t.Logf("Close took %s", time.Since(begin))
	if err := k.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	select {
	case <-k.Done():
	default:
		t.Error("Done not closed after Close")
	}
	for _, p := range []int{pid, child} {
		if alive(p) {
			t.Errorf("process %d still alive after Close", p)
		}
	}
	if _, err := os.Stat(k.connFile); !os.IsNotExist(err) {
		t.Errorf("connection file %s: %v, want it removed", k.connFile, err)
	}
	if _, err := k.Execute(t.Context(), "1", nil); !errors.Is(err, ErrDied) {
		t.Errorf("Execute after Close = %v, want ErrDied", err)
	}
	checkNoGoroutines(t)
}

// alive reports whether pid runs, waiting a little for it to go: a zombie
// (nobody reaps orphans in some containers) does not count.
func alive(pid int) bool {
	for range 20 {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return false
		}
		// The state follows the command name, which is in parentheses.
		if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && strings.HasPrefix(string(stat[i+1:]), " Z") {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

// checkNoGoroutines fails t if goroutines of this package or of zmq4
// outlive the kernels closed so far.
func checkNoGoroutines(t *testing.T) {
	t.Helper()
	var leaked []string
	for range 20 {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		leaked = leaked[:0]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "go-zeromq/zmq4") || strings.Contains(g, "jupyter.(*Kernel)") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("%d goroutines left after Close:\n%s", len(leaked), strings.Join(leaked, "\n\n"))
}

func TestStartFails(t *testing.T) {
	for _, tc := range []struct {
		name    string
		argv    []string
		timeout time.Duration
		want    error // nil: any error
	}{
		{name: "missing binary", argv: []string{"/nonexistent/kernel"}, timeout: 5 * time.Second},
		{name: "kernel exits", argv: []string{"/bin/sh", "-c", "exit 3"}, timeout: 5 * time.Second, want: ErrDied},
		{name: "kernel never listens", argv: []string{"/bin/sleep", "30"}, timeout: 300 * time.Millisecond, want: context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), tc.timeout)
			defer cancel()
			begin := time.Now()
			k, err := Start(ctx, KernelSpec{Argv: tc.argv})
			if err == nil {
				k.Close()
				t.Fatal("Start succeeded")
			}
			t.Logf("Start: %v", err)
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("Start = %v, want %v", err, tc.want)
			}
			if d := time.Since(begin); d > tc.timeout+time.Second {
				t.Errorf("Start took %s", d)
			}
			checkNoGoroutines(t)
		})
	}
}
