package tlsca

import (
	"crypto/x509"
	"os"
	"testing"
)

func TestServerCertificateVerifiesForDomainAndSubdomains(t *testing.T) {
	ca, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.ServerCertificate("sandbox.test:8443")
	if err != nil {
		t.Fatal(err)
	}
	pemBytes, err := os.ReadFile(ca.CertPath())
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pemBytes) {
		t.Fatal("CA file holds no certificate")
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sandbox.test", "api.sandbox.test", "49983-iabc.sandbox.test"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("verify %s: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "evil.test", Roots: roots}); err == nil {
		t.Error("certificate verifies for a name outside the domain")
	}
}

// The listen address is in the certificate too: header routing reaches
// the server by it (E2B_API_URL=https://127.0.0.1:3443).
func TestServerCertificateCoversTheListenAddress(t *testing.T) {
	ca, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.ServerCertificate("sandbox.test:3443", "127.0.0.1", "::1", "localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	pemBytes, _ := os.ReadFile(ca.CertPath())
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pemBytes)
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sandbox.test", "api.sandbox.test", "127.0.0.1", "::1", "localhost"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("verify %s: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "10.0.0.1", Roots: roots}); err == nil {
		t.Error("certificate verifies for an address it was not given")
	}
	if len(leaf.IPAddresses) != 2 {
		t.Errorf("IP addresses %v, want 127.0.0.1 and ::1 once each", leaf.IPAddresses)
	}
	// Another listen address is another certificate.
	again, _ := ca.ServerCertificate("sandbox.test:3443", "127.0.0.1", "::1", "localhost")
	other, _ := ca.ServerCertificate("sandbox.test:3443", "192.0.2.7")
	if string(again.Certificate[0]) != string(cert.Certificate[0]) || string(other.Certificate[0]) == string(cert.Certificate[0]) {
		t.Error("certificate not reused for the same addresses, or reused for others")
	}
}

func TestServerCertificateIsReusedUntilTheDomainChanges(t *testing.T) {
	dir := t.TempDir()
	ca, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := ca.ServerCertificate("one.test")
	ca2, err := Open(dir) // reopening keeps the CA
	if err != nil {
		t.Fatal(err)
	}
	b, _ := ca2.ServerCertificate("one.test")
	c, _ := ca2.ServerCertificate("two.test")
	if string(a.Certificate[0]) != string(b.Certificate[0]) {
		t.Error("certificate reissued for the same domain")
	}
	if string(b.Certificate[0]) == string(c.Certificate[0]) {
		t.Error("certificate not reissued for a new domain")
	}
	if fi, err := os.Stat(ca.keyPath()); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("CA key mode: %v %v", fi.Mode(), err)
	}
}
