package kubetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

// The environment variables naming the binaries, as
// `scripts/kube-tools.sh --print` sets them.
const (
	APIServerEnv = "AGENT_SANDBOX_KUBE_APISERVER"
	EtcdEnv      = "AGENT_SANDBOX_KUBE_ETCD"
)

// readyTimeout bounds the API server's start: 4 s on an idle machine, much
// longer on two cores shared with a CI run.
const readyTimeout = 3 * time.Minute

// Cluster is a running API server with its etcd.
type Cluster struct {
	// Admin is a client config with the system:masters token.
	Admin *rest.Config
	// Kubeconfig is a file with the same credentials, for kubectl.
	Kubeconfig string
	// Dir holds the processes' files and logs.
	Dir string
}

// Start runs etcd and kube-apiserver for t and returns once /readyz
// answers 200. They are stopped when t ends.
func Start(t testing.TB) *Cluster {
	t.Helper()
	apiserver, etcd := binaries(t)
	dir := t.TempDir()
	p, err := writePKI(dir)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	token := randomHex(t)
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(token+`,kubetest-admin,kubetest-admin,"system:masters"`+"\n"), 0o600); err != nil {
		t.Fatalf("kubetest: writing the token file: %v", err)
	}

	ports := freePorts(t, 3)
	etcdURL := "http://127.0.0.1:" + ports[0]
	peerURL := "http://127.0.0.1:" + ports[1]
	etcdProc := start(t, dir, "etcd", etcd,
		"--name=kubetest",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL,
		"--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=kubetest="+peerURL,
	)
	apiProc := start(t, dir, "kube-apiserver", apiserver,
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1",
		// No kubernetes Service endpoints: they refuse a loopback address,
		// and nothing here reaches the API server through the Service.
		"--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none",
		"--secure-port="+ports[2],
		"--cert-dir="+filepath.Join(dir, "apiserver-certs"),
		"--tls-cert-file="+p.servingCert,
		"--tls-private-key-file="+p.servingKey,
		"--token-auth-file="+tokens,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+p.saVerifyingKey,
		"--service-account-signing-key-file="+p.saSigningKey,
		"--service-cluster-ip-range=10.96.0.0/24",
		// The DaemonSet's pod template is privileged: validated, never run
		// (there is no kubelet), but refused without this.
		"--allow-privileged=true",
	)

	c := &Cluster{
		Admin: &rest.Config{
			Host:            "https://127.0.0.1:" + ports[2],
			BearerToken:     token,
			TLSClientConfig: rest.TLSClientConfig{CAData: p.caPEM},
		},
		Kubeconfig: filepath.Join(dir, "kubeconfig"),
		Dir:        dir,
	}
	if err := os.WriteFile(c.Kubeconfig, kubeconfig(c.Admin), 0o600); err != nil {
		t.Fatalf("kubetest: writing the kubeconfig: %v", err)
	}
	if err := waitReady(c.Admin, etcdProc, apiProc); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	return c
}

// binaries finds kube-apiserver and etcd through their environment variables.
func binaries(t testing.TB) (apiserver, etcd string) {
	t.Helper()
	var paths []string
	for _, env := range []string{APIServerEnv, EtcdEnv} {
		p := os.Getenv(env)
		testenv.Require(t, p != "", "test needs kube-apiserver and etcd: run it with `make test-cluster`, which builds them (make kube-tools) and sets $"+env)
		_, err := os.Stat(p)
		testenv.Require(t, err == nil, fmt.Sprintf("test needs $%s: %v (make kube-tools builds it)", env, err))
		paths = append(paths, p)
	}
	return paths[0], paths[1]
}

// process is one of the cluster's.
type process struct {
	name, logPath string
	exited        chan struct{} // closed when it has exited
	err           error         // its exit, once exited is closed
}

// start runs one process with its output in dir/name.log, and stops it
// when t ends: SIGTERM, then SIGKILL after 10 s, by its PID. If t failed,
// the end of the log is printed (the directory is removed with t).
func start(t testing.TB, dir, name, path string, args ...string) *process {
	t.Helper()
	p := &process{name: name, logPath: filepath.Join(dir, name+".log"), exited: make(chan struct{})}
	log, err := os.Create(p.logPath)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = log, log
	// Killed with the test binary if it dies before its cleanup runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		t.Fatalf("kubetest: starting %s: %v", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		defer log.Close()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("kubetest: the end of %s's log:\n%s", name, p.tail(40))
		}
	})
	return p
}

// tail returns the last n lines of p's log.
func (p *process) tail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// waitReady polls /readyz until it answers 200, one of procs exits, or
// readyTimeout passes.
func waitReady(cfg *rest.Config, procs ...*process) error {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return fmt.Errorf("making the readiness client: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	var last error
	for {
		if last = readyz(ctx, hc, cfg.Host); last == nil {
			return nil
		}
		for _, p := range procs {
			select {
			case <-p.exited:
				return fmt.Errorf("%s exited before kube-apiserver was ready: %v", p.name, p.err)
			default:
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver not ready after %s: %w", readyTimeout, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func readyz(ctx context.Context, hc *http.Client, host string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, host+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s: %s", resp.Status, body)
	}
	return nil
}

// freePorts returns n loopback ports free now; the processes bind them
// moments later.
func freePorts(t testing.TB, n int) []string {
	t.Helper()
	var ports []string
	var held []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("kubetest: finding a free port: %v", err)
		}
		held = append(held, l)
		ports = append(ports, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}
	for _, l := range held {
		l.Close()
	}
	return ports
}

func randomHex(t testing.TB) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
