package gateway

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/agent-sandbox/agent-sandbox/internal/egress"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
)

// answerAll is an upstream that gives every name one public address.
type answerAll struct{}

func (answerAll) Exchange(_ context.Context, q dnsmessage.Message) (dnsmessage.Message, error) {
	resp := dnsmessage.Message{Header: dnsmessage.Header{ID: q.ID, Response: true}, Questions: q.Questions}
	if q.Questions[0].Type == dnsmessage.TypeA {
		resp.Answers = []dnsmessage.Resource{{
			Header: dnsmessage.ResourceHeader{Name: q.Questions[0].Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 60},
			Body:   &dnsmessage.AResource{A: [4]byte{198, 18, 0, 10}},
		}}
	}
	return resp, nil
}

func freePort(t *testing.T) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

// lookup asks the gateway's DNS filter on addr for name over UDP.
func lookup(addr netip.AddrPort, name string) ([]string, error) {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", addr.String())
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return r.LookupHost(ctx, name)
}

// TestGateway serves a sandbox on loopback (no firewall): its DNS filter
// follows the policy, Update changes it live, the audit records it, and
// Detach stops serving.
func TestGateway(t *testing.T) {
	cfg := Config{
		Ceiling:   egress.Ceiling{AllowDomains: []string{"allowed.test"}},
		Upstream:  answerAll{},
		DNSPort:   freePort(t),
		ProxyPort: freePort(t),
		CASecret:  bytes.Repeat([]byte{3}, egress.MinCASecretLen),
	}
	gw, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	link := network.Link{HostIf: "lo", Gateway: netip.MustParseAddr("127.0.0.1"), Address: netip.MustParseAddr("127.0.0.1")}
	ctx := context.Background()
	if err := gw.Attach(ctx, "sb1", link, egress.Rules{}, network.Bandwidth{}); err != nil {
		t.Fatal(err)
	}
	ca := caKeyID(t, gw, "sb1")
	dns := netip.AddrPortFrom(link.Gateway, gw.cfg.DNSPort)
	if addrs, err := lookup(dns, "allowed.test"); err != nil || len(addrs) != 1 || addrs[0] != "198.18.0.10" {
		t.Errorf("allowed name: %v, %v", addrs, err)
	}
	if _, err := lookup(dns, "other.test"); err == nil {
		t.Error("a name off the list resolved")
	}

	rules, err := egress.ParseRules([]byte(`{"denyOut":["allowed.test"]}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Update(ctx, "sb1", rules); err != nil {
		t.Fatal(err)
	}
	if _, err := lookup(dns, "allowed.test"); err == nil {
		t.Error("a name denied by Update still resolved")
	}
	ev, next, err := gw.Events("sb1", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var denied bool
	for _, e := range ev {
		denied = denied || (e.Kind == egress.EventDNS && e.Name == "allowed.test" && !e.Allowed && e.Rule == "denyOut:allowed.test")
	}
	if !denied || next != ev[len(ev)-1].Seq {
		t.Errorf("audit lacks the denial after Update (next %d): %+v", next, ev)
	}

	if err := gw.Attach(ctx, "sb1", link, egress.Rules{}, network.Bandwidth{}); err == nil {
		t.Error("attaching an attached sandbox succeeded")
	}
	gw.Detach("sb1")
	if _, err := lookup(dns, "allowed.test"); err == nil {
		t.Error("the DNS filter answers after Detach")
	}
	if _, _, err := gw.Events("sb1", 0, 1); !errors.Is(err, ErrNotAttached) {
		t.Errorf("Events after Detach = %v, want ErrNotAttached", err)
	}
	if err := gw.Update(ctx, "sb1", rules); !errors.Is(err, ErrNotAttached) {
		t.Errorf("Update after Detach = %v, want ErrNotAttached", err)
	}
	if _, err := gw.EgressCA("sb1"); !errors.Is(err, ErrNotAttached) {
		t.Errorf("EgressCA after Detach = %v, want ErrNotAttached", err)
	}
	// The ports are free again: a new attach works, with the same CA, as
	// after a restart of the server with the same secret.
	if err := gw.Attach(ctx, "sb1", link, egress.Rules{}, network.Bandwidth{}); err != nil {
		t.Errorf("attaching after Detach: %v", err)
	}
	if again := caKeyID(t, gw, "sb1"); !bytes.Equal(again, ca) {
		t.Error("the sandbox's CA changed on a new attachment")
	}
	gw.Close()
	restarted, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer restarted.Close()
	if err := restarted.Attach(ctx, "sb1", link, egress.Rules{}, network.Bandwidth{}); err != nil {
		t.Fatal(err)
	}
	if again := caKeyID(t, restarted, "sb1"); !bytes.Equal(again, ca) {
		t.Error("the sandbox's CA changed with a new Gateway of the same secret")
	}
}

// caKeyID returns the subject key ID of sandbox id's egress CA, after
// checking that its certificate is a CA's.
func caKeyID(t *testing.T, gw *Gateway, id string) []byte {
	t.Helper()
	pemBytes, err := gw.EgressCA(id)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(pemBytes)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("EgressCA: not a PEM certificate: %q", pemBytes)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil || !cert.IsCA || len(cert.SubjectKeyId) == 0 {
		t.Fatalf("EgressCA: %v, %+v", err, cert)
	}
	return cert.SubjectKeyId
}

func TestNewChecksCeiling(t *testing.T) {
	_, err := New(Config{Ceiling: egress.Ceiling{AllowCIDRs: []string{"not-a-cidr/99"}}, Upstream: answerAll{}})
	if err == nil {
		t.Error("New accepted a malformed ceiling")
	}
	if _, err := New(Config{}); err == nil {
		t.Error("New accepted no upstream")
	}
	if _, err := New(Config{Upstream: answerAll{}, CASecret: []byte("short")}); err == nil {
		t.Error("New accepted a short CA secret")
	}
}
