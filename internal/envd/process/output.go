package process

import (
	"bytes"
	"errors"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	pb "github.com/agent-sandbox/agent-sandbox/gen/process"
)

const (
	pipeChunk = 32 << 10 // largest stdout/stderr data event, as in the reference
	ptyChunk  = 16 << 10 // largest pty data event

	// subscriberBuffer is how many data events may wait for one slow
	// client before the pumps, and so the process's writes, block.
	subscriberBuffer = 64

	// After the child exits, the pumps keep reading only what is left:
	// grandchildren that inherited the pipes or the tty (`bash -c 'srv &'`)
	// would otherwise hold the stream open for as long as they live. A pump
	// stops at EOF, after drainIdle without data, or - once drainMax has
	// passed or drainMaxBytes were read since the exit - as soon as no data
	// is immediately available. Output still buffered at exit is always
	// read, however slow the subscriber.
	drainIdle     = 250 * time.Millisecond
	drainMax      = 2 * time.Second
	drainMaxBytes = 1 << 20
	drainPoll     = 10 * time.Millisecond
)

type outputKind int

const (
	kindStdout outputKind = iota
	kindStderr
	kindPTY
)

func (k outputKind) String() string {
	switch k {
	case kindStdout:
		return "stdout"
	case kindStderr:
		return "stderr"
	default:
		return "pty"
	}
}

// output is one stream of a process that a pump reads.
type output struct {
	f     *os.File // pollable (non-blocking), so read deadlines work
	kind  outputKind
	chunk int
}

// subscription is one client's view of a process's output. Data events
// arrive on events; once the process's done channel is closed no further
// event will be added, so a reader drains events and then reports the end.
type subscription struct {
	p      *proc
	events chan *pb.ProcessEvent
	gone   chan struct{} // closed by close; unblocks a pump sending to us
	once   sync.Once
}

// subscribe starts delivering p's output to a new subscription. Output that
// was produced before is not replayed.
func (p *proc) subscribe() *subscription {
	s := &subscription{p: p, events: make(chan *pb.ProcessEvent, subscriberBuffer), gone: make(chan struct{})}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.end == nil {
		p.subs[s] = struct{}{}
	}
	return s
}

// close stops delivery to s. It is safe to call more than once.
func (s *subscription) close() {
	s.once.Do(func() {
		s.p.mu.Lock()
		delete(s.p.subs, s)
		s.p.mu.Unlock()
		close(s.gone)
	})
}

// publish hands ev to every current subscriber. A slow subscriber slows the
// process down (back-pressure, as in the reference) rather than losing
// output; one that leaves is skipped.
func (p *proc) publish(ev *pb.ProcessEvent) {
	p.mu.Lock()
	subs := make([]*subscription, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	p.mu.Unlock()
	for _, s := range subs {
		select {
		case s.events <- ev:
		case <-s.gone:
		}
	}
}

// pump reads one output until EOF, an error or the end of the drain.
func (p *proc) pump(o output) {
	defer p.pumps.Done()
	buf := make([]byte, o.chunk)
	afterExit := 0
	for {
		if p.draining.Load() {
			if afterExit >= drainMaxBytes {
				return
			}
			wait := drainIdle
			if time.Since(p.exitAt) > drainMax {
				wait = drainPoll
			}
			// Set before every read, after any time spent blocked in
			// publish, so data already buffered is never cut off.
			if err := o.f.SetReadDeadline(time.Now().Add(wait)); err != nil {
				p.log.Warn("setting read deadline", "output", o.kind.String(), "error", err)
			}
		}
		n, err := o.f.Read(buf)
		if n > 0 {
			if p.draining.Load() {
				afterExit += n
			}
			p.publish(dataEvent(o.kind, bytes.Clone(buf[:n])))
		}
		if err != nil {
			// EOF (pipes) and EIO (PTY, once every slave fd is closed)
			// are the normal ends; a deadline is the drain giving up.
			if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.EIO) && !errors.Is(err, os.ErrDeadlineExceeded) {
				p.log.Warn("reading process output", "output", o.kind.String(), "error", err)
			}
			return
		}
	}
}

// startDrain tells the pumps that the child has exited; pumps blocked in a
// read get a deadline so they return even if nobody else writes or closes.
func (p *proc) startDrain() {
	p.exitAt = time.Now()
	p.draining.Store(true)
	for _, o := range p.outputs {
		if err := o.f.SetReadDeadline(time.Now().Add(drainIdle)); err != nil {
			p.log.Warn("setting read deadline", "output", o.kind.String(), "error", err)
		}
	}
}

func dataEvent(kind outputKind, b []byte) *pb.ProcessEvent {
	data := &pb.ProcessEvent_DataEvent{}
	switch kind {
	case kindStdout:
		data.Output = &pb.ProcessEvent_DataEvent_Stdout{Stdout: b}
	case kindStderr:
		data.Output = &pb.ProcessEvent_DataEvent_Stderr{Stderr: b}
	default:
		data.Output = &pb.ProcessEvent_DataEvent_Pty{Pty: b}
	}
	return &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: data}}
}

// discard reads what is left of an output until EOF and closes it: the
// stream has ended, but background processes that inherited the pipe or
// the tty (`bash -c 'srv &'`) may write on. Closing our end at once would
// kill them with SIGPIPE at their next write, and a dying fork bomb forks
// again in their place, burning the host's CPU.
func discard(f *os.File) {
	_ = f.SetReadDeadline(time.Time{})
	_, _ = io.Copy(io.Discard, f)
	f.Close()
}
