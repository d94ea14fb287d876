package process

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	pb "github.com/agent-sandbox/agent-sandbox/gen/process"
	"github.com/agent-sandbox/agent-sandbox/gen/process/processconnect"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/identity"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/state"
)

// retainExited is how long an exited process stays connectable, so a client
// whose stream broke just before the end can still learn the exit status.
const retainExited = 30 * time.Second

// Service implements processconnect.ProcessHandler.
type Service struct {
	state  *state.State
	log    *slog.Logger
	retain time.Duration // how long exited processes stay connectable; tests shorten it

	mu    sync.Mutex // guards procs
	procs map[uint32]*proc
}

var _ processconnect.ProcessHandler = (*Service)(nil)

// NewService returns the process service.
func NewService(st *state.State, log *slog.Logger) *Service {
	return &Service{state: st, log: log, retain: retainExited, procs: map[uint32]*proc{}}
}

// Close kills every process the service started that is still running and
// waits until each has been reaped and its output drained.
func (s *Service) Close() error {
	s.mu.Lock()
	procs := make([]*proc, 0, len(s.procs))
	for _, p := range s.procs {
		procs = append(procs, p)
	}
	s.mu.Unlock()

	var errs []error
	for _, p := range procs {
		if err := p.signal(syscall.SIGKILL); err != nil && !errors.Is(err, errExited) {
			errs = append(errs, fmt.Errorf("killing process %d: %w", p.pid, err))
		}
	}
	for _, p := range procs {
		<-p.done
	}
	return errors.Join(errs...)
}

// register makes p findable by pid and tag. A retained, exited process with
// the same pid (the kernel reused it) is replaced.
func (s *Service) register(p *proc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.procs[p.pid] = p
}

// forgetLater is called once p has ended; it keeps p connectable for
// s.retain, then drops it.
func (s *Service) forgetLater(p *proc) {
	time.AfterFunc(s.retain, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.procs[p.pid] == p {
			delete(s.procs, p.pid)
		}
	})
}

// running returns the live process sel names, or a not_found error. Exited
// processes are not found even while they are retained: there is nothing
// left to signal, feed or resize.
func (s *Service) running(sel *pb.ProcessSelector) (*proc, error) {
	return s.lookup(sel, false)
}

// lookup finds the process sel names; withExited also finds processes that
// exited within the retention window (for Connect).
func (s *Service) lookup(sel *pb.ProcessSelector, withExited bool) (*proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch sel.GetSelector().(type) {
	case *pb.ProcessSelector_Pid:
		pid := sel.GetPid()
		if p, ok := s.procs[pid]; ok && (withExited || !p.hasExited()) {
			return p, nil
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found", pid))
	case *pb.ProcessSelector_Tag:
		tag := sel.GetTag()
		var best *proc
		for _, p := range s.procs {
			if p.tag == nil || *p.tag != tag || (!withExited && p.hasExited()) {
				continue
			}
			if best == nil || preferred(p, best) {
				best = p
			}
		}
		if best == nil {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with tag %s not found", tag))
		}
		return best, nil
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("process selector needs a pid or a tag"))
	}
}

// preferred reports whether a tag lookup should pick a over b: a running
// process first, then the most recently started one, so a restarted tagged
// command wins over its retained, exited predecessor.
func preferred(a, b *proc) bool {
	if ar, br := !a.hasExited(), !b.hasExited(); ar != br {
		return ar
	}
	return a.started.After(b.started)
}

// list returns the running processes ordered by pid.
func (s *Service) list() []*proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*proc, 0, len(s.procs))
	for _, p := range s.procs {
		if !p.hasExited() {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *proc) int { return cmp.Compare(a.pid, b.pid) })
	return out
}

// requestUser is the user a request acts as: the one named in its
// "Authorization: Basic" header, else envd's default user.
func (s *Service) requestUser(h http.Header) (*identity.User, error) {
	name, err := identity.BasicAuthUser(h)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("reading user: %w", err))
	}
	if name == "" {
		name = s.state.DefaultUser()
	}
	u, err := identity.Lookup(name)
	if errors.Is(err, identity.ErrUnknownUser) {
		return nil, connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("invalid username: '%s'", name))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("looking up user %q: %w", name, err))
	}
	return u, nil
}
