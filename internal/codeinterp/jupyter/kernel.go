package jupyter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-zeromq/zmq4"
)

// ErrDied is wrapped by the errors of calls that fail because the kernel
// process has exited.
var ErrDied = errors.New("kernel died")

// Timing bounds.
const (
	dialRetry     = 50 * time.Millisecond  // between dials while the kernel binds its ports
	infoRetry     = 200 * time.Millisecond // between kernel_info_requests while iopub joins
	shutdownGrace = 2 * time.Second        // for the kernel to exit after shutdown_request
	reapTimeout   = 5 * time.Second        // for the process to be reaped after SIGKILL
	eofTimeout    = time.Second            // for the readers to see their connection drop
)

// KernelSpec says how to start a kernel.
type KernelSpec struct {
	// Argv is the command line, with "{connection_file}" replaced by the
	// path of the connection file Start writes, e.g.
	// /usr/bin/python3 -m ipykernel_launcher -f {connection_file}.
	Argv []string
	// Env is the kernel's environment; nil inherits this process's.
	Env []string
	// Dir is the kernel's working directory; empty means this process's.
	Dir string
	// Output receives the kernel's stdout and stderr; nil discards them.
	Output io.Writer
	// Log receives protocol anomalies such as badly signed messages; nil
	// discards them.
	Log *slog.Logger
}

// Kernel is a running kernel process and the sockets connected to it.
type Kernel struct {
	log      *slog.Logger
	signer   signer
	session  string
	connFile string
	cmd      *exec.Cmd
	ready    bool // Start completed; set before the Kernel is shared

	shell, control, iopub zmq4.Socket
	life                  context.Context // the sockets' lifeline, cancelled by Close
	cancel                context.CancelFunc
	readers               []chan struct{} // each closed when its reader returns

	done chan struct{} // closed when the process has exited
	exit string        // how it exited; written before done is closed

	execSem chan struct{} // holds a token while an execution runs

	mu     sync.Mutex
	routes map[string]*route // guarded by mu; by request msg_id

	closeOnce sync.Once
	closeErr  error
}

// route receives the shell reply and the iopub messages whose parent is one
// of the requests it is registered for.
type route struct {
	reply chan Message
	iopub chan Message
	gone  chan struct{} // closed when the requester stops listening
}

// connectionFile is the JSON file a kernel reads its ports and key from.
type connectionFile struct {
	ShellPort       int    `json:"shell_port"`
	IOPubPort       int    `json:"iopub_port"`
	StdinPort       int    `json:"stdin_port"`
	ControlPort     int    `json:"control_port"`
	HBPort          int    `json:"hb_port"`
	IP              string `json:"ip"`
	Key             string `json:"key"`
	Transport       string `json:"transport"`
	SignatureScheme string `json:"signature_scheme"`
}

// Start writes a connection file, starts the kernel in its own process group
// and connects to it. It returns once the kernel has answered a
// kernel_info_request and iopub is known to be connected, within ctx.
func Start(ctx context.Context, spec KernelSpec) (_ *Kernel, err error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("starting kernel: empty argv")
	}
	log := spec.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	life, cancel := context.WithCancel(context.Background())
	k := &Kernel{
		log:     log,
		signer:  signer{key: []byte(newID())},
		session: newID(),
		life:    life,
		cancel:  cancel,
		done:    make(chan struct{}),
		execSem: make(chan struct{}, 1),
		routes:  make(map[string]*route),
		// Each dial is tried once; Start retries, watching ctx and the process.
		shell:   zmq4.NewDealer(life, zmq4.WithDialerMaxRetries(0)),
		control: zmq4.NewDealer(life, zmq4.WithDialerMaxRetries(0)),
		iopub:   zmq4.NewSub(life, zmq4.WithDialerMaxRetries(0)),
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, k.Close())
		}
	}()

	cf, err := k.writeConnectionFile()
	if err != nil {
		return nil, err
	}
	if err := k.startProcess(spec); err != nil {
		return nil, err
	}
	if err := k.iopub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		return nil, fmt.Errorf("subscribing to iopub: %w", err)
	}
	for _, s := range []struct {
		sock zmq4.Socket
		port int
	}{{k.shell, cf.ShellPort}, {k.control, cf.ControlPort}, {k.iopub, cf.IOPubPort}} {
		if err := k.dial(ctx, s.sock, fmt.Sprintf("tcp://%s:%d", cf.IP, s.port)); err != nil {
			return nil, err
		}
	}
	k.readers = []chan struct{}{make(chan struct{}), make(chan struct{})}
	go k.read(k.shell, "shell", func(r *route) chan Message { return r.reply }, k.readers[0])
	go k.read(k.iopub, "iopub", func(r *route) chan Message { return r.iopub }, k.readers[1])
	if err := k.handshake(ctx); err != nil {
		return nil, err
	}
	k.ready = true
	return k, nil
}

// writeConnectionFile picks the ports and writes the connection file.
func (k *Kernel) writeConnectionFile() (connectionFile, error) {
	ports, err := freePorts(5)
	if err != nil {
		return connectionFile{}, err
	}
	cf := connectionFile{
		ShellPort:       ports[0],
		IOPubPort:       ports[1],
		StdinPort:       ports[2],
		ControlPort:     ports[3],
		HBPort:          ports[4],
		IP:              "127.0.0.1",
		Key:             string(k.signer.key),
		Transport:       "tcp",
		SignatureScheme: "hmac-sha256",
	}
	b, err := json.Marshal(cf)
	if err != nil {
		return connectionFile{}, fmt.Errorf("encoding connection file: %w", err)
	}
	f, err := os.CreateTemp("", "kernel-*.json") // mode 0600: it holds the key
	if err != nil {
		return connectionFile{}, fmt.Errorf("creating connection file: %w", err)
	}
	k.connFile = f.Name()
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return connectionFile{}, fmt.Errorf("writing connection file: %w", err)
	}
	return cf, nil
}

// freePorts returns n distinct ports that were free on 127.0.0.1. They are
// held open together so that they differ, then released for the kernel.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// startProcess starts the kernel and a goroutine that reaps it.
func (k *Kernel) startProcess(spec KernelSpec) error {
	argv := make([]string, len(spec.Argv))
	for i, a := range spec.Argv {
		argv[i] = strings.ReplaceAll(a, "{connection_file}", k.connFile)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	env := spec.Env
	if env == nil {
		env = os.Environ()
	}
	// As jupyter_client does: ipykernel then exits when it is orphaned.
	cmd.Env = append(slices.Clip(env), "JPY_PARENT_PID="+strconv.Itoa(os.Getpid()))
	cmd.Dir = spec.Dir
	if spec.Output != nil {
		cmd.Stdout, cmd.Stderr = spec.Output, spec.Output
		// Children that outlive the kernel may hold the output pipe open.
		cmd.WaitDelay = time.Second
	}
	if err := setGroup(cmd); err != nil {
		return fmt.Errorf("starting kernel %s: %w", argv[0], err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting kernel %s: %w", argv[0], err)
	}
	k.cmd = cmd
	go func() {
		err := cmd.Wait()
		switch {
		case cmd.ProcessState != nil:
			k.exit = cmd.ProcessState.String()
		default:
			k.exit = err.Error()
		}
		close(k.done)
	}()
	return nil
}

// dial connects sock to ep, retrying while the kernel has not bound it yet.
func (k *Kernel) dial(ctx context.Context, sock zmq4.Socket, ep string) error {
	for {
		err := sock.Dial(ep)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("connecting to kernel at %s: %w (last: %v)", ep, ctx.Err(), err)
		case <-k.done:
			return fmt.Errorf("connecting to kernel at %s: %w", ep, k.died())
		case <-time.After(dialRetry):
		}
	}
}

// handshake waits for a kernel_info_reply on shell and, because a SUB
// socket only receives what is published after its subscription reached the
// publisher, for a status message on iopub whose parent is one of our
// requests. Until that arrives it repeats the request, each of which makes
// the kernel publish a busy and an idle status.
func (k *Kernel) handshake(ctx context.Context) error {
	r := k.newRoute()
	defer k.dropRoute(r)
	if err := k.request(k.shell, r, "kernel_info_request", struct{}{}); err != nil {
		return err
	}
	tick := time.NewTicker(infoRetry)
	defer tick.Stop()
	var replied, joined bool
	for !replied || !joined {
		select {
		case <-r.reply:
			replied = true
		case m := <-r.iopub:
			joined = joined || m.Header.MsgType == "status"
		case <-tick.C:
			if !joined {
				if err := k.request(k.shell, r, "kernel_info_request", struct{}{}); err != nil {
					return err
				}
			}
		case <-ctx.Done():
			return fmt.Errorf("waiting for kernel_info_reply (replied %t) and iopub (joined %t): %w", replied, joined, ctx.Err())
		case <-k.done:
			return fmt.Errorf("waiting for kernel_info_reply: %w", k.died())
		}
	}
	return nil
}

// newRoute returns a route for requests not yet sent.
func (k *Kernel) newRoute() *route {
	return &route{
		reply: make(chan Message, 1),
		iopub: make(chan Message, 64),
		gone:  make(chan struct{}),
	}
}

// dropRoute unregisters r from all its requests and releases a reader
// blocked on delivering to it.
func (k *Kernel) dropRoute(r *route) {
	k.mu.Lock()
	for id, rr := range k.routes {
		if rr == r {
			delete(k.routes, id)
		}
	}
	k.mu.Unlock()
	close(r.gone)
}

// request sends a msgType request on sock; its reply and iopub messages go
// to r unless r is nil.
func (k *Kernel) request(sock zmq4.Socket, r *route, msgType string, content any) error {
	frames, id, err := k.signer.encode(k.session, msgType, content)
	if err != nil {
		return err
	}
	if r != nil {
		k.mu.Lock()
		k.routes[id] = r
		k.mu.Unlock()
	}
	if err := sock.SendMulti(zmq4.NewMsgFrom(frames...)); err != nil {
		return fmt.Errorf("sending %s: %w", msgType, err)
	}
	return nil
}

// read receives messages from sock and delivers each to the route of its
// parent request, dropping those nobody waits for. It returns when the
// connection drops (zmq4 does not reconnect) or the socket closes. It never
// drops a message for a live route: a slow consumer holds it up, and with it
// the kernel, which buffers up to its high-water mark.
func (k *Kernel) read(sock zmq4.Socket, channel string, pick func(*route) chan Message, done chan struct{}) {
	defer close(done)
	for {
		zm, err := sock.Recv()
		if err != nil {
			if k.life.Err() == nil {
				k.log.Debug("kernel connection ended", "channel", channel, "err", err)
			}
			return
		}
		if zm.Type == zmq4.CmdMsg {
			continue // a ZMTP command (PING) that zmq4 passes up
		}
		m, err := k.signer.decode(zm.Frames)
		if err != nil {
			k.log.Warn("dropping kernel message", "channel", channel, "err", err)
			continue
		}
		k.mu.Lock()
		r := k.routes[m.ParentHeader.MsgID]
		k.mu.Unlock()
		if r == nil {
			continue
		}
		select {
		case pick(r) <- m:
		case <-r.gone:
		case <-k.life.Done():
			return
		}
	}
}

// Interrupt sends SIGINT to the kernel's process group, which is how
// ipykernel (interrupt_mode "signal") is interrupted.
func (k *Kernel) Interrupt() error {
	select {
	case <-k.done:
		return fmt.Errorf("interrupting kernel: %w", k.died())
	default:
	}
	if err := signalGroup(k.cmd.Process.Pid, syscall.SIGINT); err != nil {
		return fmt.Errorf("interrupting kernel: %w", err)
	}
	return nil
}

// Done is closed when the kernel process exits.
func (k *Kernel) Done() <-chan struct{} { return k.done }

// died describes the exit of the process; call it once done is closed.
func (k *Kernel) died() error {
	return fmt.Errorf("%w (%s)", ErrDied, k.exit)
}

// Close shuts the kernel down: a shutdown_request on control, then SIGKILL
// to its process group after a grace period. It closes the sockets and
// removes the connection file. It is idempotent.
func (k *Kernel) Close() error {
	k.closeOnce.Do(func() { k.closeErr = k.shutdown() })
	return k.closeErr
}

// exited reports whether the kernel process has ended.
func (k *Kernel) exited() bool {
	select {
	case <-k.done:
		return true
	default:
		return false
	}
}

func (k *Kernel) shutdown() error {
	var errs []error
	if k.ready && !k.exited() {
		err := k.request(k.control, nil, "shutdown_request", map[string]bool{"restart": false})
		select {
		case <-k.done:
			// Also when the request failed: a kernel that died
			// meanwhile closed the connection under it.
		case <-time.After(shutdownGrace):
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	if k.cmd != nil {
		// Also after a clean exit: the code may have left processes behind.
		if err := signalGroup(k.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("killing kernel process group: %w", err))
		}
		select {
		case <-k.done:
		case <-time.After(reapTimeout):
			errs = append(errs, fmt.Errorf("kernel process %d not reaped %s after SIGKILL", k.cmd.Process.Pid, reapTimeout))
		}
	}
	// Let the readers take zmq4's queue down to the connection's end before
	// cancelling them: zmq4's per-connection goroutine blocks forever on
	// handing a message to a full queue nobody reads.
	eof := time.After(eofTimeout)
	for _, done := range k.readers {
		select {
		case <-done:
		case <-eof:
		}
	}
	k.cancel()
	for _, s := range []zmq4.Socket{k.shell, k.control, k.iopub} {
		// A dropped connection was closed by zmq4 already.
		if err := s.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, fmt.Errorf("closing kernel socket: %w", err))
		}
	}
	for _, done := range k.readers {
		<-done
	}
	if k.connFile != "" {
		if err := os.Remove(k.connFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing connection file: %w", err))
		}
	}
	return errors.Join(errs...)
}
