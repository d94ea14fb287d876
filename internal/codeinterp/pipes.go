package codeinterp

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"io"
	"sync"
	"unicode/utf8"
)

// event is one thing a runtime's process reported: text read from its
// stdout or stderr, a marker line found in one of them, or (a
// ProcessRuntime's kernel) a protocol message.
type event struct {
	kind   OutputKind // Stdout or Stderr for text and markers
	text   string
	marker string // the payload of a marker line; "" for text
	isMark bool
	msg    *kernelMsg
}

// maxInbox bounds the events an inbox keeps while nobody takes them (output
// of background work between executions); more are dropped.
const maxInbox = 1 << 16

// inbox collects a process's events from several reader goroutines, in the
// order they arrive, for the one goroutine running an execution. Putting
// never blocks, so a chatty process never stalls between executions.
type inbox struct {
	notify chan struct{} // receives a token when events were put

	mu     sync.Mutex // guards events
	events []event
}

func newInbox() *inbox { return &inbox{notify: make(chan struct{}, 1)} }

func (b *inbox) put(e event) {
	b.mu.Lock()
	if len(b.events) < maxInbox {
		b.events = append(b.events, e)
	}
	b.mu.Unlock()
	select {
	case b.notify <- struct{}{}:
	default:
	}
}

// take removes and returns the events put so far.
func (b *inbox) take() []event {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.events
	b.events = nil
	return e
}

// newMarkPrefix returns a random marker prefix: a record separator, a
// random token and a colon. User output cannot guess it.
func newMarkPrefix() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails
	return "\x1e" + hex.EncodeToString(b[:]) + ":"
}

// readMarked reads a process's output pipe until it ends and puts what it
// reads into b as text events of kind, except that each prefix+payload+"\n"
// becomes a marker event with that payload. Text is passed on as soon as it
// arrives, holding back only what may start a marker or split a UTF-8
// character.
func readMarked(r io.Reader, kind OutputKind, prefix string, b *inbox) {
	p := []byte(prefix)
	buf := make([]byte, 32<<10)
	var pending []byte
	for {
		n, err := r.Read(buf)
		pending = append(pending, buf[:n]...)
		for {
			i := bytes.Index(pending, p)
			if i < 0 {
				break
			}
			j := bytes.IndexByte(pending[i+len(p):], '\n')
			if j < 0 {
				break
			}
			if i > 0 {
				b.put(event{kind: kind, text: string(pending[:i])})
			}
			b.put(event{kind: kind, isMark: true, marker: string(pending[i+len(p) : i+len(p)+j])})
			pending = pending[i+len(p)+j+1:]
		}
		if err != nil {
			if len(pending) > 0 {
				b.put(event{kind: kind, text: string(pending)})
			}
			return
		}
		if keep := sendable(pending, p); keep > 0 {
			b.put(event{kind: kind, text: string(pending[:keep])})
			pending = append([]byte(nil), pending[keep:]...)
		}
	}
}

// sendable returns how much of pending can be passed on as text: all but
// an incomplete marker, a tail that may begin one, or a split UTF-8
// character.
func sendable(pending, prefix []byte) int {
	n := len(pending)
	if i := bytes.Index(pending, prefix); i >= 0 {
		n = i
	} else {
		for k := min(len(prefix)-1, n); k > 0; k-- {
			if bytes.HasSuffix(pending, prefix[:k]) {
				n -= k
				break
			}
		}
	}
	// Back off over a UTF-8 sequence cut short at the end.
	for k := 1; k <= 3 && k <= n; k++ {
		c := pending[n-k]
		if utf8.RuneStart(c) {
			if !utf8.FullRune(pending[n-k : n]) {
				n -= k
			}
			break
		}
	}
	return n
}
