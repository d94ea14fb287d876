package filesystem

import (
	"log/slog"
	"sync"

	pb "github.com/agent-sandbox/agent-sandbox/gen/filesystem"
)

// maxPendingEvents bounds how many events a polling watcher keeps between
// two polls; later ones are dropped (and the drop logged).
const maxPendingEvents = 1 << 14

// pollingWatcher collects a watcher's events until they are polled. It is
// what CreateWatcher starts, GetWatcherEvents drains and RemoveWatcher stops.
type pollingWatcher struct {
	w         *watcher
	log       *slog.Logger
	collected chan struct{} // closed when collect returns

	mu      sync.Mutex // guards pending and dropped
	pending []*pb.FilesystemEvent
	dropped int
}

func newPollingWatcher(w *watcher, log *slog.Logger) *pollingWatcher {
	p := &pollingWatcher{w: w, log: log, collected: make(chan struct{})}
	go p.collect()
	return p
}

func (p *pollingWatcher) collect() {
	defer close(p.collected)
	for ev := range p.w.Events() {
		p.mu.Lock()
		if len(p.pending) < maxPendingEvents {
			p.pending = append(p.pending, ev)
		} else {
			p.dropped++
		}
		p.mu.Unlock()
	}
}

// take returns the events collected since the previous take.
func (p *pollingWatcher) take() []*pb.FilesystemEvent {
	p.mu.Lock()
	evs, dropped := p.pending, p.dropped
	p.pending, p.dropped = nil, 0
	p.mu.Unlock()
	if dropped > 0 {
		p.log.Warn("polling watcher dropped events: not polled often enough", "dropped", dropped)
	}
	return evs
}

// Close stops the watcher and waits until collecting has ended.
func (p *pollingWatcher) Close() error {
	err := p.w.Close()
	<-p.collected
	return err
}
