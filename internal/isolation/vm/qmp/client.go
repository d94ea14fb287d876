package qmp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"
)

// ErrClosed is returned (wrapped) by calls on a client whose connection has
// ended: Close was called, or QEMU closed its end (it quit or died).
var ErrClosed = errors.New("qmp connection closed")

// Error is QEMU's answer to a command it refused: its error class (such as
// "GenericError" or "CommandNotFound") and description.
type Error struct {
	Command string // the command QEMU refused
	Class   string
	Desc    string
}

func (e *Error) Error() string {
	return fmt.Sprintf("qmp %s: %s: %s", e.Command, e.Class, e.Desc)
}

// Client is a QMP connection to one QEMU process. Its methods are safe for
// concurrent use: each command carries an id, and a reader goroutine hands
// each reply to the call that waits for it and each event to the
// subscriptions (Subscribe), so events never stand in for replies.
type Client struct {
	conn *net.UnixConn

	// fdmu is held across a whole ExecuteWithFile: QEMU keeps the last
	// descriptor it received on the socket for the next command that asks
	// for one, so only one command that passes a descriptor may be in flight.
	fdmu sync.Mutex
	// wmu serializes writes to conn: a command and its descriptor go in one
	// sendmsg, and no other command may interleave with it.
	wmu sync.Mutex

	mu      sync.Mutex // guards the fields below
	nextID  uint64
	pending map[string]chan message // by command id
	subs    map[*Subscription]struct{}
	closing bool  // Close was called
	err     error // why the connection ended; set once, before done closes

	done chan struct{} // closed when the reader goroutine has ended
}

// message is anything QEMU sends after the greeting: a reply (Return or
// Error, with the command's ID) or an event (Event).
type message struct {
	ID     string          `json:"id"`
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`

	Event     string          `json:"event"`
	Data      json.RawMessage `json:"data"`
	Timestamp struct {
		Seconds      int64 `json:"seconds"`
		Microseconds int64 `json:"microseconds"`
	} `json:"timestamp"`
}

type request struct {
	Execute   string `json:"execute"`
	Arguments any    `json:"arguments,omitempty"`
	ID        string `json:"id"`
}

// Dial connects to the QMP socket at path (QEMU's -qmp unix:PATH,server=on),
// reads QEMU's greeting and leaves capabilities negotiation mode
// (qmp_capabilities), after which commands may be executed and events arrive.
func Dial(ctx context.Context, path string) (*Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("qmp: connecting to %s: %w", path, err)
	}
	// The greeting is read before the reader goroutine exists: a ctx that
	// ends meanwhile unblocks it through the deadline.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Unix(1, 0)) })
	dec := json.NewDecoder(conn)
	var greeting struct {
		QMP *json.RawMessage `json:"QMP"`
	}
	err = dec.Decode(&greeting)
	if !stop() {
		err = ctx.Err()
	}
	if err == nil && greeting.QMP == nil {
		err = errors.New("the first message is not a QMP greeting")
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("qmp: reading the greeting from %s: %w", path, err)
	}
	c := &Client{
		conn:    conn.(*net.UnixConn),
		pending: make(map[string]chan message),
		subs:    make(map[*Subscription]struct{}),
		done:    make(chan struct{}),
	}
	go c.read(dec)
	if err := c.Execute(ctx, "qmp_capabilities", nil, nil); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Execute runs the QMP command cmd with args (nil for none; otherwise a
// value that marshals to a JSON object) and unmarshals its return value
// into result unless result is nil. A command QEMU refuses returns an
// *Error.
func (c *Client) Execute(ctx context.Context, cmd string, args, result any) error {
	return c.execute(ctx, cmd, args, nil, result)
}

// ExecuteWithFile is Execute with f passed to QEMU alongside the command
// (SCM_RIGHTS), for the commands that take a descriptor, such as getfd.
// QEMU gets its own copy: the caller still owns f.
func (c *Client) ExecuteWithFile(ctx context.Context, cmd string, args any, f *os.File, result any) error {
	c.fdmu.Lock()
	defer c.fdmu.Unlock()
	return c.execute(ctx, cmd, args, f, result)
}

func (c *Client) execute(ctx context.Context, cmd string, args any, f *os.File, result any) error {
	id, ch, err := c.register()
	if err != nil {
		return fmt.Errorf("qmp %s: %w", cmd, err)
	}
	defer c.unregister(id)
	b, err := json.Marshal(request{Execute: cmd, Arguments: args, ID: id})
	if err != nil {
		return fmt.Errorf("qmp %s: encoding the arguments: %w", cmd, err)
	}
	if err := c.write(b, f); err != nil {
		return fmt.Errorf("qmp %s: sending: %w", cmd, err)
	}
	var m message
	select {
	case m = <-ch:
	case <-ctx.Done():
		return fmt.Errorf("qmp %s: %w", cmd, ctx.Err())
	case <-c.done:
		select {
		case m = <-ch: // the reply came just before the end
		default:
			return fmt.Errorf("qmp %s: %w", cmd, c.err)
		}
	}
	if m.Error != nil {
		return &Error{Command: cmd, Class: m.Error.Class, Desc: m.Error.Desc}
	}
	if result != nil {
		if err := json.Unmarshal(m.Return, result); err != nil {
			return fmt.Errorf("qmp %s: decoding the reply %s: %w", cmd, m.Return, err)
		}
	}
	return nil
}

// register reserves an id and the channel its reply will arrive on.
func (c *Client) register() (string, chan message, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return "", nil, c.err
	}
	c.nextID++
	id := strconv.FormatUint(c.nextID, 10)
	ch := make(chan message, 1) // the reader never blocks on a caller
	c.pending[id] = ch
	return id, ch, nil
}

// unregister forgets id, so that a reply arriving after its caller gave up
// (its ctx ended) is dropped rather than kept.
func (c *Client) unregister(id string) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

func (c *Client) write(b []byte, f *os.File) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if f == nil {
		_, err := c.conn.Write(b)
		return err
	}
	oob, err := unixRights(f)
	if err != nil {
		return err
	}
	n, _, err := c.conn.WriteMsgUnix(b, oob, nil)
	runtime.KeepAlive(f) // the descriptor must stay open until sendmsg has copied it
	if err == nil && n < len(b) {
		_, err = c.conn.Write(b[n:])
	}
	return err
}

// read hands QEMU's replies to their callers and its events to the
// subscriptions until the connection ends.
func (c *Client) read(dec *json.Decoder) {
	for {
		var m message
		if err := dec.Decode(&m); err != nil {
			c.end(err)
			return
		}
		if m.Event != "" {
			c.publish(Event{
				Name: m.Event,
				Data: m.Data,
				Time: time.Unix(m.Timestamp.Seconds, m.Timestamp.Microseconds*1000),
			})
			continue
		}
		c.mu.Lock()
		ch := c.pending[m.ID]
		delete(c.pending, m.ID)
		c.mu.Unlock()
		if ch != nil { // nil: a reply whose caller gave up, or one without an id
			ch <- m
		}
	}
}

// end records why the connection ended and wakes every waiter.
func (c *Client) end(readErr error) {
	c.mu.Lock()
	if c.closing {
		c.err = ErrClosed
	} else {
		c.err = fmt.Errorf("%w: QEMU ended the connection: %v", ErrClosed, readErr)
	}
	c.mu.Unlock()
	close(c.done)
}

// Done is closed when the connection has ended: after Close, or once QEMU
// closed its end (it quit or died).
func (c *Client) Done() <-chan struct{} { return c.done }

// Close ends the connection; calls still waiting return ErrClosed. QEMU
// keeps running (Quit ends it).
func (c *Client) Close() error {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	err := c.conn.Close()
	<-c.done
	if errors.Is(err, net.ErrClosed) {
		return nil // closed twice, or QEMU's end was already gone
	}
	return err
}
