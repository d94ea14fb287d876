package vm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation/vm/vminit"
)

// The guest's serial console is a unix socket QEMU listens on
// (consoleFd). The backend stays connected to it for the VM's life, and
// connects again after adopting the VM: it keeps the console's tail for
// the exit reason, and writes the requests the guest's init serves
// (vminit.Request), whose answers come back on it.

// connectConsole connects to the console's socket at path and copies
// what the guest prints into inst.console until QEMU closes it.
func (inst *Instance) connectConsole(ctx context.Context, path string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return fmt.Errorf("connecting to the guest's console: %w", err)
	}
	inst.mu.Lock()
	inst.consoleConn = c
	inst.mu.Unlock()
	go func() {
		defer close(inst.consoleRead)
		_, _ = io.Copy(inst.console, c)
	}()
	return nil
}

// requestTimeout bounds the guest's answer to a request: an emulated
// (TCG) guest restored beside three others on two loaded cores once took
// over 10 s to answer its identity. syncTimeout bounds OpSync, which
// writes back up to the guest's memory through an emulated disk.
const (
	requestTimeout = 30 * time.Second
	syncTimeout    = time.Minute
)

// request has the guest's init carry out r, and waits for its answer.
func (inst *Instance) request(ctx context.Context, r vminit.Request) error {
	inst.requests.Lock()
	defer inst.requests.Unlock()
	r.Nonce = newToken()[:16]
	line, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("asking the guest's init to %s: %w", r.Op, err)
	}
	timeout := requestTimeout
	if r.Op == vminit.OpSync {
		timeout = syncTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if dl, ok := ctx.Deadline(); ok {
		_ = inst.consoleConn.SetWriteDeadline(dl)
	}
	if _, err := inst.consoleConn.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("asking the guest's init to %s: %w", r.Op, err)
	}
	done := fmt.Sprintf(vminit.Done, r.Op, r.Nonce)
	answer, err := inst.console.waitLine(ctx, done, "vminit: "+r.Op+" "+r.Nonce+":", "vminit: request:")
	if err != nil {
		return fmt.Errorf("asking the guest's init to %s: no answer: %w%s", r.Op, err, inst.console.quote())
	}
	if answer != done {
		return fmt.Errorf("asking the guest's init to %s: %s", r.Op, strings.TrimPrefix(answer, "vminit: "))
	}
	return nil
}

// consoleTail is how much of the guest's console (and QEMU's own
// messages) a VM keeps, for its exit reason.
const consoleTail = 16 << 10

// tail keeps the last max bytes written to it.
type tail struct {
	max     int
	mu      sync.Mutex
	buf     []byte
	written chan struct{} // closed and replaced at each Write
}

func newTail() *tail { return &tail{max: consoleTail} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.written != nil {
		close(t.written)
		t.written = nil
	}
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return bytes.Clone(t.buf)
}

// waitLine waits until a line of the console starts with one of
// prefixes, and returns it (without the newline).
func (t *tail) waitLine(ctx context.Context, prefixes ...string) (string, error) {
	for {
		t.mu.Lock()
		lines := bytes.Split(t.buf, []byte("\n"))
		for _, line := range lines[:len(lines)-1] { // the last is not ended yet
			line = bytes.TrimRight(line, "\r")
			for _, p := range prefixes {
				if bytes.HasPrefix(line, []byte(p)) {
					t.mu.Unlock()
					return string(line), nil
				}
			}
		}
		if t.written == nil {
			t.written = make(chan struct{})
		}
		written := t.written
		t.mu.Unlock()
		select {
		case <-written:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// quote is the last KiB of the console, for an error message.
func (t *tail) quote() string {
	b := t.bytes()
	if len(b) == 0 {
		return ""
	}
	if len(b) > 1024 {
		b = b[len(b)-1024:]
	}
	return "; console: " + strconv.Quote(string(bytes.TrimSpace(b)))
}
