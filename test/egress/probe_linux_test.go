package egress

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"

	"github.com/agent-sandbox/agent-sandbox/internal/sandbox/sandboxtest"
)

// probeTimeout bounds each network attempt inside a sandbox: a dropped
// packet shows as a timeout.
const probeTimeout = 2 * time.Second

// probeMain is what /usr/bin/probe (this test binary, copied into the
// sandbox's rootfs) runs. It prints one line: "ok …", or "fail …" with the
// error; the test reads those.
func probeMain(args []string) int {
	if len(args) == 0 {
		fmt.Println("fail usage: probe CMD ARGS")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := probe(ctx, args[0], args[1:])
	if err != nil {
		fmt.Println("fail", err)
		return 1
	}
	fmt.Println("ok", out)
	return 0
}

func probe(ctx context.Context, cmd string, args []string) (string, error) {
	switch cmd {
	case "dns": // NAME: the system resolver, i.e. /etc/resolv.conf
		r := &net.Resolver{PreferGo: true}
		ctx, cancel := context.WithTimeout(ctx, probeTimeout)
		defer cancel()
		addrs, err := r.LookupHost(ctx, args[0])
		slices.Sort(addrs)
		return strings.Join(addrs, ","), err
	case "dnsat": // SERVER NAME: ask a given server, over UDP
		r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", args[0])
		}}
		ctx, cancel := context.WithTimeout(ctx, probeTimeout)
		defer cancel()
		addrs, err := r.LookupHost(ctx, args[1])
		return strings.Join(addrs, ","), err
	case "get": // URL [ADDR]: GET, connecting to ADDR instead of resolving
		body, err := get(ctx, args[0], optional(args, 1), probeTimeout)
		return strings.TrimSpace(string(body)), err
	case "absent": // HEXSECRET CONTROL: the secret is nowhere the sandbox can read
		secret, err := hex.DecodeString(args[0])
		if err != nil {
			return "", fmt.Errorf("decoding the secret: %w", err)
		}
		return absent(secret, []byte(args[1]))
	case "tcp": // ADDR: connect and echo
		return "", echo(ctx, "tcp", args[0])
	case "udp": // ADDR: send and wait for the echo
		return "", echo(ctx, "udp", args[0])
	case "ping": // IP: one ICMP echo over a raw socket (CAP_NET_RAW)
		return "", ping(args[0])
	case "connect-times": // N URL: GET N times on fresh connections; prints ms each
		n, _ := strconv.Atoi(args[0])
		var ms []string
		for range n {
			t0 := time.Now()
			if _, err := get(ctx, args[1], "", probeTimeout); err != nil {
				return "", err
			}
			ms = append(ms, strconv.FormatFloat(float64(time.Since(t0).Microseconds())/1000, 'f', 3, 64))
		}
		return strings.Join(ms, " "), nil
	case "download": // URL: GET a body, counting it; prints "begin", then the bytes
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, args[0], nil)
		if err != nil {
			return "", err
		}
		begin()
		resp, err := client("", 50*time.Second).Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		n, err := io.Copy(io.Discard, resp.Body)
		return strconv.FormatInt(n, 10), err
	case "upload": // URL BYTES: POST a body; prints "begin", then the bytes the server read
		n, _ := strconv.ParseInt(args[1], 10, 64)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, args[0], io.LimitReader(zeros{}, n))
		if err != nil {
			return "", err
		}
		req.ContentLength = n
		begin()
		resp, err := client("", 50*time.Second).Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		return strings.TrimSpace(string(got)), err
	}
	return "", fmt.Errorf("unknown probe %q", cmd)
}

// begin marks, for a transfer the test times on the host's clock, when
// it starts: the guest's clock is not the host's (a VM's may run fast or
// slow), and the process's start is no part of the transfer.
func begin() {
	fmt.Println("begin")
	os.Stdout.Sync()
}

func optional(args []string, i int) string {
	if len(args) > i {
		return args[i]
	}
	return ""
}

// get fetches url, trusting the test CA; with addr, it connects there
// instead of resolving the URL's host (curl --resolve).
func get(ctx context.Context, url, addr string, timeout time.Duration) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client(addr, timeout).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// client is an HTTP client that trusts the system's roots, as the
// sandbox's trust store has them (its egress proxy's CA among them), and
// the test CA.
func client(addr string, timeout time.Duration) *http.Client {
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if pem, err := os.ReadFile(sandboxtest.CAFile); err == nil {
		pool.AppendCertsFromPEM(pem)
	}
	dialer := &net.Dialer{Timeout: probeTimeout}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool},
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			if addr != "" {
				_, port, _ := net.SplitHostPort(a)
				a = net.JoinHostPort(addr, port)
			}
			return dialer.DialContext(ctx, network, a)
		},
	}}
}

func echo(ctx context.Context, network, addr string) error {
	d := net.Dialer{Timeout: probeTimeout}
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(probeTimeout))
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != "ping" {
		return fmt.Errorf("echo answered %q", buf)
	}
	return nil
}

// ping sends an ICMP echo from an unprivileged ping socket, as ping(8)
// does where ping_group_range allows (sandboxes in a user namespace hold
// no CAP_NET_RAW), else from a raw socket.
func ping(ip string) error {
	network, dst := "udp4", net.Addr(&net.UDPAddr{IP: net.ParseIP(ip)})
	c, err := icmp.ListenPacket(network, "0.0.0.0")
	if err != nil {
		network, dst = "ip4:icmp", &net.IPAddr{IP: net.ParseIP(ip)}
		if c, err = icmp.ListenPacket(network, "0.0.0.0"); err != nil {
			return err
		}
	}
	defer c.Close()
	msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: os.Getpid() & 0xffff, Seq: 1, Data: []byte("probe")}}
	b, err := msg.Marshal(nil)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(b, dst); err != nil {
		return err
	}
	c.SetReadDeadline(time.Now().Add(probeTimeout))
	buf := make([]byte, 1500)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return err
		}
		m, err := icmp.ParseMessage(1, buf[:n])
		if err == nil && m.Type == ipv4.ICMPTypeEchoReply && strings.TrimSuffix(from.String(), ":0") == ip {
			return nil
		}
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			continue
		}
	}
}

// absent looks for secret in everything a process in the sandbox can
// read: its environment, every process's environment and command line in
// /proc, and every regular file (but /proc, /sys and /dev, and files over
// 64 MiB). As a positive control it looks for control in the same places
// at the same time: the test sets it in the sandbox's env, it is on this
// probe's command line, and the probe writes it to a file first; a scan
// that does not find it everywhere proves nothing.
func absent(secret, control []byte) (string, error) {
	found := map[string]map[string]bool{"secret": {}, "control": {}}
	look := func(where string, b []byte) {
		if bytes.Contains(b, secret) {
			found["secret"][where] = true
		}
		if bytes.Contains(b, control) {
			found["control"][where] = true
		}
	}
	look("env", []byte(strings.Join(os.Environ(), "\n")))
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		for _, f := range []string{"environ", "cmdline"} {
			if b, err := os.ReadFile(filepath.Join(p, f)); err == nil {
				look("/proc/*/"+f, b)
			}
		}
	}
	if err := os.WriteFile("/tmp/absent-control", control, 0o600); err != nil {
		return "", fmt.Errorf("writing the control to a file: %w", err)
	}
	files := 0
	filepath.WalkDir("/", func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return nil // unreadable: nothing there for the sandbox either
		case d.IsDir() && (path == "/proc" || path == "/sys" || path == "/dev"):
			return fs.SkipDir
		case !d.Type().IsRegular():
			return nil
		}
		if info, err := d.Info(); err != nil || info.Size() > 64<<20 {
			return nil
		}
		if b, err := os.ReadFile(path); err == nil {
			files++
			look("files", b)
		}
		return nil
	})
	for _, where := range []string{"env", "/proc/*/environ", "/proc/*/cmdline", "files"} {
		if !found["control"][where] {
			return "", fmt.Errorf("the control is not in %s: the scan finds nothing", where)
		}
	}
	if len(found["secret"]) > 0 {
		return "", fmt.Errorf("the secret is in %v", slices.Sorted(maps.Keys(found["secret"])))
	}
	return fmt.Sprintf("secret nowhere; control in env, /proc/*/environ, /proc/*/cmdline and %d files read", files), nil
}

// zeros is an endless reader of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
