package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/chromedp/cdproto/cdp"
	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"
	"github.com/coder/websocket"
)

// conn is a cdp.Session over one WebSocket to a page target.
type conn struct {
	ws   *websocket.Conn
	done chan struct{} // closed when the read loop ends

	mu      sync.Mutex // guards the fields below
	nextID  int64
	pending map[int64]chan reply
	subs    map[*subscription]struct{}
	err     error // why the read loop ended
}

// subscription takes the events of its methods from the read loop, which
// must never block on it.
type subscription struct {
	methods map[string]bool
	deliver func(Event)
}

// Event is an event of the page: its method and parameters.
type Event struct {
	Method string
	Params jsonv2.Value
}

var _ cdp.Session = (*conn)(nil)

// writeTimeout bounds the sending of one command; a connection that
// cannot take a frame for that long is broken.
const writeTimeout = 10 * time.Second

// reply is a command's answer: its result or the browser's error.
type reply struct {
	result jsonv2.Value
	err    error
}

// message is a frame of the protocol: a command's answer or an event.
type message struct {
	ID     int64           `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// newConn starts reading ws; onClose runs once the connection ends.
func newConn(ws *websocket.Conn, onClose func()) *conn {
	ws.SetReadLimit(64 << 20) // screenshots and PDFs come base64 in one frame
	c := &conn{ws: ws, done: make(chan struct{}), pending: map[int64]chan reply{}, subs: map[*subscription]struct{}{}}
	go c.read(onClose)
	return c
}

func (c *conn) read(onClose func()) {
	defer close(c.done)
	defer onClose()
	for {
		_, data, err := c.ws.Read(context.Background())
		if err != nil {
			c.fail(fmt.Errorf("reading from DevTools: %w", err))
			return
		}
		var m message
		if err := json.Unmarshal(data, &m); err != nil {
			c.fail(fmt.Errorf("decoding a DevTools message: %w", err))
			c.ws.Close(websocket.StatusProtocolError, "bad message")
			return
		}
		c.mu.Lock()
		if m.Method != "" {
			for sub := range c.subs {
				if sub.methods[m.Method] {
					sub.deliver(Event{Method: m.Method, Params: jsonv2.Value(m.Params)})
				}
			}
		} else if ch, ok := c.pending[m.ID]; ok {
			delete(c.pending, m.ID)
			r := reply{result: jsonv2.Value(m.Result)}
			if m.Error != nil {
				r.err = fmt.Errorf("%s (%d)", m.Error.Message, m.Error.Code)
			}
			ch <- r
		}
		c.mu.Unlock()
	}
}

// fail ends every call in flight with err.
func (c *conn) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
	for id, ch := range c.pending {
		ch <- reply{err: err}
		delete(c.pending, id)
	}
}

// Call implements cdp.Session.
func (c *conn) Call(ctx context.Context, method string, params, result any) error {
	raw, err := jsonv2.Marshal(params)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", method, err)
	}
	ch := make(chan reply, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return c.err
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = ch
	c.mu.Unlock()
	frame, _ := json.Marshal(struct {
		ID     int64           `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}{id, method, json.RawMessage(raw)}) // raw is valid JSON
	// Not ctx: the WebSocket closes when a write's context ends, and an
	// action's deadline must end the action, not the session.
	wctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	if err := c.ws.Write(wctx, websocket.MessageText, frame); err != nil {
		c.forget(id)
		return fmt.Errorf("sending %s: %w", method, err)
	}
	select {
	case r := <-ch:
		if r.err != nil {
			return fmt.Errorf("%s: %w", method, r.err)
		}
		if result == nil || len(r.result) == 0 {
			return nil
		}
		if err := jsonv2.Unmarshal(r.result, result); err != nil {
			return fmt.Errorf("decoding the answer to %s: %w", method, err)
		}
		return nil
	case <-ctx.Done():
		c.forget(id)
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

func (c *conn) forget(id int64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// subscriberRoom is the events a subscriber may fall behind by, room for a
// busy page's burst of network events; one further behind loses events
// rather than stall the reader.
const subscriberRoom = 1024

// Subscribe implements cdp.Session.
func (c *conn) Subscribe(method string) (<-chan jsonv2.Value, func()) {
	ch := make(chan jsonv2.Value, subscriberRoom)
	return ch, c.subscribe([]string{method}, func(ev Event) {
		select {
		case ch <- ev.Params:
		default:
		}
	})
}

// Events is Subscribe for several methods on one channel, in the order
// the page sent them: the end of a request never overtakes its start.
func (c *conn) Events(methods ...string) (<-chan Event, func()) {
	ch := make(chan Event, subscriberRoom)
	return ch, c.subscribe(methods, func(ev Event) {
		select {
		case ch <- ev:
		default:
		}
	})
}

func (c *conn) subscribe(methods []string, deliver func(Event)) func() {
	sub := &subscription{methods: map[string]bool{}, deliver: deliver}
	for _, m := range methods {
		sub.methods[m] = true
	}
	c.mu.Lock()
	c.subs[sub] = struct{}{}
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		delete(c.subs, sub)
		c.mu.Unlock()
	}
}

// Close closes the WebSocket and waits for the reader to end.
func (c *conn) Close() {
	c.ws.CloseNow() // the page stays: it is Chromium's, shared with the DevTools endpoint
	<-c.done
}
