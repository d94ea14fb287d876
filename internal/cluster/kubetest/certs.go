package kubetest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is what the API server's TLS and service accounts need, as files.
type pki struct {
	caPEM          []byte
	servingCert    string // the API server's, for 127.0.0.1 and localhost
	servingKey     string
	saSigningKey   string // service account tokens' signing key
	saVerifyingKey string
}

// writePKI makes a CA, a serving certificate it signs and a service account
// key pair, and writes them under dir.
func writePKI(dir string) (*pki, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the CA key: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kubetest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("signing the CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("parsing the CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the serving key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("signing the serving certificate: %w", err)
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the service account key: %w", err)
	}
	p := &pki{
		caPEM:          pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		servingCert:    filepath.Join(dir, "apiserver.crt"),
		servingKey:     filepath.Join(dir, "apiserver.key"),
		saSigningKey:   filepath.Join(dir, "sa.key"),
		saVerifyingKey: filepath.Join(dir, "sa.pub"),
	}
	files := []struct {
		path  string
		block func() (*pem.Block, error)
	}{
		{p.servingCert, func() (*pem.Block, error) { return &pem.Block{Type: "CERTIFICATE", Bytes: der}, nil }},
		{p.servingKey, func() (*pem.Block, error) { return privatePEM(key) }},
		{p.saSigningKey, func() (*pem.Block, error) { return privatePEM(saKey) }},
		{p.saVerifyingKey, func() (*pem.Block, error) {
			b, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
			return &pem.Block{Type: "PUBLIC KEY", Bytes: b}, err
		}},
	}
	for _, f := range files {
		b, err := f.block()
		if err != nil {
			return nil, fmt.Errorf("encoding %s: %w", filepath.Base(f.path), err)
		}
		if err := os.WriteFile(f.path, pem.EncodeToMemory(b), 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func privatePEM(k *ecdsa.PrivateKey) (*pem.Block, error) {
	b, err := x509.MarshalECPrivateKey(k)
	return &pem.Block{Type: "EC PRIVATE KEY", Bytes: b}, err
}
