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
