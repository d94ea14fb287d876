package browser

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/chromedp/cdproto/cdp"
	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"
	"github.com/chromedp/cdproto/page"
)

// The page's screencast, for the live view of a browser sandbox
// (internal/liveview): Chromium sends a JPEG of the viewport when the page
// paints, and the next only once the previous is acknowledged. A session
// runs one screencast while anybody watches, fans each frame out to its
// watchers, and acknowledges frames at most frameRate times a second, so
// that an animated page costs Chromium a bounded amount of encoding.

// Frame is a picture of the page: a JPEG of its viewport.
type Frame struct {
	JPEG []byte
	// Width and Height are the viewport's, in CSS pixels: the size an
	// InputEvent's fractions are of.
	Width, Height float64
}

// ErrSessionEnded is a screencast whose DevTools session ended (the
// sandbox paused, or Chromium restarted): a new Watch opens another.
var ErrSessionEnded = errors.New("the browser's DevTools session ended")

const (
	// frameRate bounds the frames a second the screencast sends.
	frameRate = 15
	// frameQuality is the JPEG quality (0 to 100) of the frames.
	frameQuality = 70
	// maxFrameWidth and maxFrameHeight bound a frame's size: Chromium
	// scales a larger viewport down.
	maxFrameWidth, maxFrameHeight = 1920, 1080
)

// screencast is a session's one Page screencast, run while it has
// watchers.
type screencast struct {
	conn *conn

	ctl  sync.Mutex // held while the screencast starts or stops; guards stop
	stop func()     // ends the running screencast's relay; nil when none runs

	mu       sync.Mutex // guards watchers and last
	watchers map[*Watcher]struct{}
	last     *Frame // the running screencast's latest frame
}

// Watcher is one viewer of the page's screencast. Its methods may be
// called concurrently.
type Watcher struct {
	cast *screencast
	// ready holds a token while there is a frame Next has not returned.
	ready chan struct{}
	frame *Frame // the latest frame delivered; guarded by cast.mu
	// seen is the latest frame Next returned, guarded by cast.mu: a frame
	// delivered while Next took the token leaves a token for itself.
	seen *Frame
}

// Watch starts watching the page's screencast, starting it unless it
// runs already; the latest frame, if there is one, is the first Next
// returns. Close the watcher when done.
func (s *Session) Watch(ctx context.Context) (*Watcher, error) {
	c := &s.cast
	c.ctl.Lock()
	defer c.ctl.Unlock()
	w := &Watcher{cast: c, ready: make(chan struct{}, 1)}
	c.mu.Lock()
	c.watchers[w] = struct{}{}
	if c.last != nil {
		w.frame = c.last
		w.ready <- struct{}{}
	}
	c.mu.Unlock()
	if c.stop == nil {
		if err := c.start(ctx); err != nil {
			c.mu.Lock()
			delete(c.watchers, w)
			c.mu.Unlock()
			return nil, err
		}
	}
	return w, nil
}

// start starts the screencast and the relay of its frames; c.ctl is held.
func (c *screencast) start(ctx context.Context) error {
	frames, unsubscribe := c.conn.Subscribe(page.ScreencastFrame.Method)
	relayCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.relay(relayCtx, frames)
	}()
	stop := func() {
		cancel()
		<-done
		unsubscribe()
		c.mu.Lock()
		c.last = nil
		c.mu.Unlock()
	}
	// One frame in flight, and the page's last paint kept for the
	// acknowledgement: a page that changes while relay paces the frames
	// and then rests is still seen as it rests.
	params := page.StartScreencastParams{
		Format: page.StartScreencastFormatJpeg, Quality: ptr[int64](frameQuality),
		MaxWidth: maxFrameWidth, MaxHeight: maxFrameHeight, EveryNthFrame: 1,
		MaxFramesInFlight: 1, SendLastFrame: ptr(true),
	}
	if _, err := cdp.Call(ctx, c.conn, page.StartScreencast, params); err != nil {
		stop()
		return fmt.Errorf("starting the screencast: %w", err)
	}
	c.stop = stop
	return nil
}

// relay hands each frame to the watchers and acknowledges it, no sooner
// than a frame interval after the previous one, until ctx ends or the
// session does.
func (c *screencast) relay(ctx context.Context, frames <-chan jsonv2.Value) {
	var acked time.Time
	for {
		var raw jsonv2.Value
		select {
		case raw = <-frames:
		case <-ctx.Done():
			return
		case <-c.conn.done:
			return
		}
		var ev page.EventScreencastFrame
		if err := jsonv2.Unmarshal(raw, &ev); err != nil {
			continue // without its sessionId it cannot be acknowledged either
		}
		if ev.Metadata != nil {
			c.deliver(ctx, &Frame{JPEG: ev.Data, Width: ev.Metadata.DeviceWidth, Height: ev.Metadata.DeviceHeight})
		}
		select {
		case <-time.After(time.Until(acked.Add(time.Second / frameRate))):
		case <-ctx.Done():
			return
		case <-c.conn.done:
			return
		}
		acked = time.Now()
		// The session's end shows in conn.done, and a screencast stopped
		// meanwhile needs no acknowledgement.
		_, _ = cdp.Call(ctx, c.conn, page.ScreencastFrameAck, page.ScreencastFrameAckParams{SessionID: ev.SessionID})
	}
}

// deliver makes f the latest frame of every watcher, unless the relay of
// ctx was stopped meanwhile.
func (c *screencast) deliver(ctx context.Context, f *Frame) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ctx.Err() != nil {
		return
	}
	c.last = f
	for w := range c.watchers {
		w.frame = f
		select {
		case w.ready <- struct{}{}:
		default: // it has one waiting: the newer frame replaces it
		}
	}
}

// Next waits for a frame the watcher has not had and returns the latest:
// a watcher slower than the screencast skips frames rather than fall
// behind. ErrSessionEnded once the DevTools session ended.
func (w *Watcher) Next(ctx context.Context) (Frame, error) {
	for {
		select {
		case <-w.ready:
		case <-w.cast.conn.done:
			return Frame{}, ErrSessionEnded
		case <-ctx.Done():
			return Frame{}, ctx.Err()
		}
		w.cast.mu.Lock()
		f := w.frame
		fresh := f != w.seen
		w.seen = f
		w.cast.mu.Unlock()
		if fresh {
			return *f, nil
		}
	}
}

// Close stops watching; the last watcher's Close stops the screencast.
func (w *Watcher) Close() {
	c := w.cast
	c.ctl.Lock()
	defer c.ctl.Unlock()
	c.mu.Lock()
	_, watching := c.watchers[w]
	delete(c.watchers, w)
	idle := len(c.watchers) == 0
	c.mu.Unlock()
	if !watching || !idle || c.stop == nil {
		return
	}
	c.stop()
	c.stop = nil
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	// A session that ended has no screencast left to stop.
	_, _ = cdp.Call(ctx, c.conn, page.StopScreencast, cdp.Empty{})
}
