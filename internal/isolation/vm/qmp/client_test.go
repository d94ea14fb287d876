package qmp

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// fakeQEMU serves one QMP connection on a unix socket: it greets, accepts
// qmp_capabilities, and hands every later request to the test through
// requests; the test answers through send.
type fakeQEMU struct {
	path     string
	requests chan request
	conn     chan net.Conn // the accepted connection, once
}

func newFakeQEMU(t *testing.T) *fakeQEMU {
	t.Helper()
	f := &fakeQEMU{
		path:     filepath.Join(t.TempDir(), "qmp.sock"),
		requests: make(chan request, 16),
		conn:     make(chan net.Conn, 1),
	}
	l, err := net.Listen("unix", f.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		t.Cleanup(func() { conn.Close() })
		conn.Write([]byte(`{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}}, "capabilities": ["oob"]}}` + "\r\n"))
		dec := json.NewDecoder(conn)
		var r request
		if dec.Decode(&r) != nil || r.Execute != "qmp_capabilities" {
			return
		}
		conn.Write([]byte(`{"return": {}, "id": "` + r.ID + `"}` + "\r\n"))
		f.conn <- conn
		for {
			var r request
			if dec.Decode(&r) != nil {
				close(f.requests)
				return
			}
			f.requests <- r
		}
	}()
	return f
}

func (f *fakeQEMU) dial(t *testing.T) (*Client, net.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, f.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, <-f.conn
}

func (f *fakeQEMU) next(t *testing.T) request {
	t.Helper()
	select {
	case r := <-f.requests:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("the fake QEMU got no request")
		return request{}
	}
}

func send(t *testing.T, conn net.Conn, line string) {
	t.Helper()
	if _, err := conn.Write([]byte(line + "\r\n")); err != nil {
		t.Fatal(err)
	}
}

// TestLateReplyDropped: the reply to a call whose ctx ended arrives later,
// in front of the next call's own reply and with an event between; the
// next call must get its own reply and the event must go to the
// subscription only.
func TestLateReplyDropped(t *testing.T) {
	f := newFakeQEMU(t)
	c, conn := f.dial(t)
	sub := c.Subscribe()
	defer sub.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.Execute(ctx, "first", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first: %v, want the deadline", err)
	}
	first := f.next(t)

	type answer struct{ Who string }
	done := make(chan error, 1)
	var got answer
	go func() { done <- c.Execute(context.Background(), "second", map[string]int{"n": 2}, &got) }()
	second := f.next(t)
	if second.Execute != "second" || second.ID == first.ID {
		t.Fatalf("second request %+v, first %+v", second, first)
	}
	send(t, conn, `{"return": {"Who": "first"}, "id": "`+first.ID+`"}`)
	send(t, conn, `{"event": "STOP", "timestamp": {"seconds": 1700000000, "microseconds": 5}}`)
	send(t, conn, `{"return": {"Who": "second"}, "id": "`+second.ID+`"}`)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got.Who != "second" {
		t.Errorf("second got the reply meant for %q", got.Who)
	}
	e, err := sub.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if e.Name != "STOP" || !e.Time.Equal(time.Unix(1700000000, 5000)) {
		t.Errorf("event %+v, want STOP at 1700000000.000005", e)
	}
}

// TestConnectionEnds: when QEMU goes away, a waiting call fails with
// ErrClosed, Done closes, and a subscription yields the events that came
// before the end, then ErrClosed.
func TestConnectionEnds(t *testing.T) {
	f := newFakeQEMU(t)
	c, conn := f.dial(t)
	sub := c.Subscribe()
	defer sub.Close()

	done := make(chan error, 1)
	go func() { done <- c.Execute(context.Background(), "quit", nil, nil) }()
	f.next(t)
	send(t, conn, `{"event": "SHUTDOWN", "data": {"guest": false, "reason": "host-qmp-quit"}, "timestamp": {"seconds": 1, "microseconds": 0}}`)
	conn.Close()

	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Errorf("call waiting when QEMU went away: %v, want ErrClosed", err)
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done did not close")
	}
	if e, err := sub.Next(context.Background()); err != nil || e.Name != "SHUTDOWN" {
		t.Errorf("first Next: %+v, %v; want the SHUTDOWN that came before the end", e, err)
	}
	if _, err := sub.Next(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("second Next: %v, want ErrClosed", err)
	}
	if err := c.Execute(context.Background(), "query-status", nil, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("call after the end: %v, want ErrClosed", err)
	}
}

// TestClose: Close fails a waiting call with ErrClosed and waits for the
// reader; a second Close is harmless.
func TestClose(t *testing.T) {
	f := newFakeQEMU(t)
	c, _ := f.dial(t)
	done := make(chan error, 1)
	go func() { done <- c.Execute(context.Background(), "stop", nil, nil) }()
	f.next(t)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Errorf("call waiting at Close: %v, want ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestDialNotQMP: something other than QEMU on the socket is refused.
func TestDialNotQMP(t *testing.T) {
	path := filepath.Join(t.TempDir(), "qmp.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		conn, err := l.Accept()
		if err == nil {
			conn.Write([]byte(`{"hello": "world"}` + "\n"))
			defer conn.Close()
			time.Sleep(time.Second)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := Dial(ctx, path); err == nil || err.Error() != "qmp: reading the greeting from "+path+": the first message is not a QMP greeting" {
		t.Errorf("Dial: %v", err)
	}
}
