package sandbox

import (
	"context"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// metricsRetention is how far back Metrics can look.
const metricsRetention = time.Hour

// maxRingSize caps the samples kept per sandbox whatever the period.
const maxRingSize = 3600

// Metrics returns the samples taken in [start, end]. A zero start or end
// leaves that side open. The result is never nil.
func (m *Manager) Metrics(ctx context.Context, id string, start, end time.Time) ([]Metric, error) {
	sb, err := m.lookup(id)
	if err != nil {
		return nil, err
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.state == store.StateKilled {
		return nil, notFound(id)
	}
	out := []Metric{}
	sb.metrics.each(func(s Metric) {
		if (start.IsZero() || !s.Timestamp.Before(start)) && (end.IsZero() || !s.Timestamp.After(end)) {
			out = append(out, s)
		}
	})
	return out, nil
}

func (m *Manager) ringSize() int {
	return min(max(int(metricsRetention/m.cfg.MetricsEvery), 1), maxRingSize)
}

// metricsLoop samples every running sandbox every MetricsEvery.
func (m *Manager) metricsLoop() {
	t := time.NewTicker(m.cfg.MetricsEvery)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		for _, sb := range m.live() {
			if sb.current() == store.StateRunning {
				m.sample(sb)
			}
		}
	}
}

// sample takes one sample of sb.
func (m *Manager) sample(sb *sandbox) {
	ctx, cancel := context.WithTimeout(context.Background(), max(m.cfg.MetricsEvery, time.Second))
	defer cancel()
	st, err := sb.instance().Stats(ctx)
	if err != nil {
		sb.log.Debug("sampling metrics", "err", err)
		return
	}
	s := Metric{
		Timestamp:  st.Time,
		CPUCount:   st.CPUCount,
		CPUUsedPct: st.CPUUsedPct,
		MemUsed:    st.MemUsed,
		MemTotal:   st.MemTotal,
		MemCache:   st.MemCache,
		DiskUsed:   st.DiskUsed,
		DiskTotal:  st.DiskTotal,
	}
	if s.Timestamp.IsZero() {
		s.Timestamp = m.cfg.Now()
	}
	if s.CPUCount == 0 {
		s.CPUCount = sb.cpus
	}
	sb.mu.Lock()
	sb.metrics.add(s)
	oom := st.OOMKills > sb.oomKills
	sb.oomKills = st.OOMKills
	sb.mu.Unlock()
	if oom {
		sb.log.Warn("out of memory: the kernel killed a process of the sandbox", "oom_kills", st.OOMKills)
	}
	m.collectGuestLog(sb)
}

// ring keeps the newest size samples; it grows up to size, then
// overwrites the oldest.
type ring struct {
	buf  []Metric
	size int
	next int // where the next sample goes once buf is full
}

func newRing(size int) ring { return ring{size: size} }

func (r *ring) add(s Metric) {
	if len(r.buf) < r.size {
		r.buf = append(r.buf, s)
		return
	}
	r.buf[r.next] = s
	r.next = (r.next + 1) % r.size
}

// each calls f on every sample, oldest first.
func (r *ring) each(f func(Metric)) {
	for _, s := range r.buf[r.next:] {
		f(s)
	}
	for _, s := range r.buf[:r.next] {
		f(s)
	}
}
