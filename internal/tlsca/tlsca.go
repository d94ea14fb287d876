// Package tlsca keeps the small certificate authority that `serve --tls`
// uses: a CA created once under the data directory, whose certificate users
// hand to their clients (NODE_EXTRA_CA_CERTS), and a server certificate for
// the domain, every name under it and the listen address, reissued when
// one of those changes or the certificate nears expiry.
package tlsca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"
)

const (
	caValidity     = 10 * 365 * 24 * time.Hour
	leafValidity   = 365 * 24 * time.Hour
	leafRenewAfter = leafValidity - 30*24*time.Hour
)

// CA is the authority's files in a directory.
type CA struct {
	dir string
}

// Open returns the CA in dir (mode 0700), creating it if needed.
func Open(dir string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	ca := &CA{dir: dir}
	if _, err := os.Stat(ca.CertPath()); errors.Is(err, os.ErrNotExist) {
		if err := ca.create(); err != nil {
			return nil, err
		}
	}
	return ca, nil
}

// CertPath is the CA certificate clients must trust.
func (ca *CA) CertPath() string { return filepath.Join(ca.dir, "ca.pem") }

func (ca *CA) keyPath() string { return filepath.Join(ca.dir, "ca-key.pem") }

func (ca *CA) create() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "agent-sandbox local CA", Organization: []string{"agent-sandbox"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("signing CA certificate: %w", err)
	}
	// Key first: a certificate without its key would be unusable.
	if err := writePEM(ca.keyPath(), "EC PRIVATE KEY", marshalKey(key), 0o600); err != nil {
		return err
	}
	return writePEM(ca.CertPath(), "CERTIFICATE", der, 0o644)
}

// ServerCertificate returns a certificate for domain and *.domain (the port
// of a "host:port" domain is ignored) and for each of hosts, the other
// names and IP addresses clients reach the server by (the listen address,
// for header routing), reusing the one on disk when it still fits.
func (ca *CA) ServerCertificate(domain string, hosts ...string) (tls.Certificate, error) {
	host := domain
	if h, _, err := net.SplitHostPort(domain); err == nil {
		host = h
	}
	names := []string{host, "*." + host}
	var ips []net.IP
	if host == "localhost" {
		ips = append(ips, net.IPv4(127, 0, 0, 1), net.IPv6loopback)
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			if !slices.ContainsFunc(ips, ip.Equal) {
				ips = append(ips, ip)
			}
		} else if !slices.Contains(names, h) {
			names = append(names, h)
		}
	}
	certPath, keyPath := filepath.Join(ca.dir, "server.pem"), filepath.Join(ca.dir, "server-key.pem")
	if cert, err := tls.LoadX509KeyPair(certPath, keyPath); err == nil && fits(cert, names, ips) {
		return cert, nil
	}
	caCert, err := tls.LoadX509KeyPair(ca.CertPath(), ca.keyPath())
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("loading CA from %s: %w", ca.dir, err)
	}
	caX509, err := x509.ParseCertificate(caCert.Certificate[0])
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("parsing CA certificate: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("generating server key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     names,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(leafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	tmpl.IPAddresses = ips
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caX509, &key.PublicKey, caCert.PrivateKey)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("signing server certificate for %s: %w", host, err)
	}
	if err := writePEM(keyPath, "EC PRIVATE KEY", marshalKey(key), 0o600); err != nil {
		return tls.Certificate{}, err
	}
	if err := writePEM(certPath, "CERTIFICATE", der, 0o644); err != nil {
		return tls.Certificate{}, err
	}
	return tls.LoadX509KeyPair(certPath, keyPath)
}

func fits(cert tls.Certificate, names []string, ips []net.IP) bool {
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return false
	}
	return slices.Equal(leaf.DNSNames, names) && slices.EqualFunc(leaf.IPAddresses, ips, net.IP.Equal) &&
		time.Since(leaf.NotBefore) < leafRenewAfter
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127)) // crypto/rand does not fail
	return n
}

func marshalKey(key *ecdsa.PrivateKey) []byte {
	der, _ := x509.MarshalECPrivateKey(key) // a P-256 key always marshals
	return der
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
