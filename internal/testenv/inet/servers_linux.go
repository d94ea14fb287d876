package inet

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// listeners are the servers' sockets. They are opened inside the namespace
// and belong to it for their whole life, wherever they are used from.
type listeners struct {
	http, https, echo, dnsTCP net.Listener
	// httpAlt serves HTTP on AltHTTPPort, which the sandbox firewall does not
	// redirect to the egress proxy: the direct path to compare it with.
	httpAlt net.Listener
	dnsUDP  net.PacketConn
	// One UDP echo socket per address: a socket bound to 0.0.0.0 would
	// answer from the address routing picks, which a client's connected
	// socket drops.
	echoUDP []net.PacketConn
}

// listen opens the listeners; it runs inside the namespace. On error it
// closes what it opened.
func listen(dns netip.Addr, addrs []netip.Addr) (ls *listeners, err error) {
	ls = &listeners{}
	defer func() {
		if err != nil {
			ls.close()
		}
	}()
	tcp := func(addr string) (net.Listener, error) {
		ln, err := net.Listen("tcp4", addr)
		if err != nil {
			return nil, fmt.Errorf("listening on tcp %s: %w", addr, err)
		}
		return ln, nil
	}
	udp := func(addr string) (net.PacketConn, error) {
		pc, err := net.ListenPacket("udp4", addr)
		if err != nil {
			return nil, fmt.Errorf("listening on udp %s: %w", addr, err)
		}
		return pc, nil
	}
	if ls.http, err = tcp("0.0.0.0:80"); err != nil {
		return nil, err
	}
	if ls.httpAlt, err = tcp("0.0.0.0:" + strconv.Itoa(AltHTTPPort)); err != nil {
		return nil, err
	}
	if ls.https, err = tcp("0.0.0.0:443"); err != nil {
		return nil, err
	}
	if ls.echo, err = tcp("0.0.0.0:7"); err != nil {
		return nil, err
	}
	dnsAddr := netip.AddrPortFrom(dns, 53).String()
	if ls.dnsTCP, err = tcp(dnsAddr); err != nil {
		return nil, err
	}
	if ls.dnsUDP, err = udp(dnsAddr); err != nil {
		return nil, err
	}
	for _, a := range addrs {
		pc, err := udp(netip.AddrPortFrom(a, 7).String())
		if err != nil {
			return nil, err
		}
		ls.echoUDP = append(ls.echoUDP, pc)
	}
	return ls, nil
}

func (ls *listeners) close() {
	for _, c := range []io.Closer{ls.http, ls.httpAlt, ls.https, ls.echo, ls.dnsTCP, ls.dnsUDP} {
		if c != nil {
			c.Close()
		}
	}
	for _, pc := range ls.echoUDP {
		pc.Close()
	}
}

// servers runs the Internet's services on its listeners until close.
type servers struct {
	ls          *listeners
	http, https *http.Server
	wg          sync.WaitGroup // every goroutine below

	mu     sync.Mutex
	closed bool                  // guarded by mu
	conns  map[net.Conn]struct{} // open echo and DNS TCP connections; guarded by mu
}

func serve(ls *listeners, cert tls.Certificate, dns *dnsServer) *servers {
	s := &servers{ls: ls, conns: make(map[net.Conn]struct{})}
	// The standard logger would print every TLS handshake a test fails on
	// purpose; clients see the errors that matter.
	quiet := log.New(io.Discard, "", 0)
	s.http = &http.Server{Handler: siteHandler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: quiet}
	s.https = &http.Server{
		Handler:           siteHandler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          quiet,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}},
	}
	s.wg.Go(func() { s.http.Serve(ls.http) })
	s.wg.Go(func() { s.http.Serve(ls.httpAlt) })
	s.wg.Go(func() { s.https.ServeTLS(ls.https, "", "") })
	s.accept(ls.echo, func(c net.Conn) { io.Copy(c, c) })
	s.accept(ls.dnsTCP, dns.serveConn)
	s.wg.Go(func() { dns.servePackets(ls.dnsUDP) })
	for _, pc := range ls.echoUDP {
		s.wg.Go(func() { echoPackets(pc) })
	}
	return s
}

// accept serves each connection on ln with handle until close.
func (s *servers) accept(ln net.Listener, handle func(net.Conn)) {
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed, or broken beyond what a test can use
			}
			s.mu.Lock()
			if s.closed {
				s.mu.Unlock()
				c.Close()
				return
			}
			s.conns[c] = struct{}{}
			s.mu.Unlock()
			s.wg.Go(func() {
				defer func() {
					s.mu.Lock()
					delete(s.conns, c)
					s.mu.Unlock()
					c.Close()
				}()
				handle(c)
			})
		}
	})
}

// close stops the servers and waits for their goroutines. Handlers of the
// HTTP servers' connections may outlive it briefly: their connections are
// closed, so they fail at their next write.
func (s *servers) close() error {
	s.mu.Lock()
	s.closed = true
	conns := make([]net.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	err := errors.Join(s.http.Close(), s.https.Close())
	s.ls.close()
	for _, c := range conns {
		c.Close()
	}
	s.wg.Wait()
	if err != nil {
		return fmt.Errorf("closing HTTP servers: %w", err)
	}
	return nil
}

func echoPackets(pc net.PacketConn) {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := pc.ReadFrom(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		pc.WriteTo(buf[:n], from)
	}
}

// siteHandler serves every site: which one was asked for is in the answer.
func siteHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		fmt.Fprintf(w, "site=%s local=%s", host, local)
	})
	mux.HandleFunc("GET /bytes", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		if err != nil || n < 0 {
			http.Error(w, "n: want a byte count", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		buf := make([]byte, 32<<10)
		for n > 0 {
			k := min(n, int64(len(buf)))
			if _, err := w.Write(buf[:k]); err != nil {
				return
			}
			n -= k
		}
	})
	mux.HandleFunc("GET /digest", func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Query().Get("header")
		values := r.Header.Values(name)
		if name == "" || len(values) == 0 {
			http.Error(w, fmt.Sprintf("no header %q", name), http.StatusNotFound)
			return
		}
		fmt.Fprintf(w, "sha256=%x", sha256.Sum256([]byte(strings.Join(values, "\n"))))
	})
	mux.HandleFunc("POST /sink", func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, fmt.Sprintf("reading body: %v", err), http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, n)
	})
	return mux
}

// newCertificate makes a CA and a server certificate it signs for names and
// addrs, and returns the CA's certificate in PEM. The key lives only in
// memory, for the test's lifetime.
func newCertificate(names []string, addrs []netip.Addr) ([]byte, tls.Certificate, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("generating CA key: %w", err)
	}
	// Backdated against clock skew between the host and a sandbox's VM.
	notBefore, notAfter := time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "agent-sandbox test internet CA"},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("creating CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("parsing CA certificate: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("generating server key: %w", err)
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "agent-sandbox test internet"},
		DNSNames:    names,
		NotBefore:   notBefore,
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, a := range addrs {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(a.AsSlice()))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("creating server certificate: %w", err)
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	return caPEM, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
