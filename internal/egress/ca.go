package egress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"time"
)

// MinCASecretLen is the least length of the secret CAs are derived from.
const MinCASecretLen = 32

// Bounds and lifetimes of what a CA issues.
const (
	// maxLeaves bounds the certificates a CA keeps; a rule for a wildcard
	// may match any number of names.
	maxLeaves = 256
	// A leaf is valid from leafBackdate before it is made (a VM's clock
	// may be behind the host's) for leafLifetime, and made anew once less
	// than leafRenew of it is left.
	leafBackdate = 24 * time.Hour
	leafLifetime = 7 * 24 * time.Hour
	leafRenew    = 24 * time.Hour
)

// The CA certificate's validity: fixed, so that the certificate derived
// again after a restart is the one the sandbox already trusts, and long,
// since a sandbox may live (paused) for as long as its owner wants.
var (
	caNotBefore = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	caNotAfter  = time.Date(2125, 1, 1, 0, 0, 0, 0, time.UTC)
)

// CA is one sandbox's interception certificate authority. The sandbox
// trusts its certificate (the manager installs it at create); the proxy
// presents certificates it signs when it terminates TLS for a name with
// header rules. Its key is derived from the server's secret and the
// sandbox's ID, so a restarted server has the same CA for the same sandbox
// without storing keys, and it never leaves the host. A CA is safe for
// concurrent use.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey

	mu      sync.Mutex
	leafKey *ecdsa.PrivateKey           // made at the first leaf; guarded by mu
	leaves  map[string]*tls.Certificate // by name; guarded by mu
}

// NewCA derives the CA of sandbox id from secret (at least MinCASecretLen
// bytes, kept by the server).
func NewCA(secret []byte, id string) (*CA, error) {
	if len(secret) < MinCASecretLen {
		return nil, fmt.Errorf("making the egress CA of %s: the secret has %d bytes, want at least %d", id, len(secret), MinCASecretLen)
	}
	key, err := deriveKey(secret, "agent-sandbox egress CA key "+id)
	if err != nil {
		return nil, fmt.Errorf("making the egress CA of %s: %w", id, err)
	}
	serial, err := hkdf.Key(sha256.New, secret, nil, "agent-sandbox egress CA serial "+id, 16)
	if err != nil {
		return nil, fmt.Errorf("making the egress CA of %s: %w", id, err)
	}
	serial[0] &= 0x7f // positive, as RFC 5280 wants
	tmpl := &x509.Certificate{
		SerialNumber:          new(big.Int).SetBytes(serial),
		Subject:               pkix.Name{Organization: []string{"agent-sandbox"}, CommonName: "agent-sandbox egress CA for " + id},
		NotBefore:             caNotBefore,
		NotAfter:              caNotAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	cert, der, err := sign(tmpl, tmpl, key, key)
	if err != nil {
		return nil, fmt.Errorf("making the egress CA of %s: %w", id, err)
	}
	return &CA{
		cert:    cert,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:     key,
		leaves:  make(map[string]*tls.Certificate),
	}, nil
}

// deriveKey derives a P-256 private key from secret and info: an HKDF
// output read as the scalar, the next one tried in the rare case (about
// 2^-32) that it is not below the curve's order.
func deriveKey(secret []byte, info string) (*ecdsa.PrivateKey, error) {
	for i := 0; i < 8; i++ {
		scalar, err := hkdf.Key(sha256.New, secret, nil, fmt.Sprintf("%s #%d", info, i), 32)
		if err != nil {
			return nil, err
		}
		if key, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), scalar); err == nil {
			return key, nil
		}
	}
	return nil, errors.New("deriving a key: no valid scalar")
}

// sign makes the certificate tmpl describes, for subject's public key,
// signed by parent's key signer, and returns it parsed and in DER.
func sign(tmpl, parent *x509.Certificate, subject, signer *ecdsa.PrivateKey) (*x509.Certificate, []byte, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, subject.Public(), signer)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, der, err
}

// CertPEM is the CA's certificate in PEM, what the sandbox trusts.
func (ca *CA) CertPEM() []byte { return ca.certPEM }

// leaf returns a certificate for name signed by the CA, valid at now,
// made anew when the one kept is close to its end.
func (ca *CA) leaf(name string, now time.Time) (*tls.Certificate, error) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c := ca.leaves[name]; c != nil && now.Add(leafRenew).Before(c.Leaf.NotAfter) {
		return c, nil
	}
	if ca.leafKey == nil {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("making the egress proxy's certificate key: %w", err)
		}
		ca.leafKey = k
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("making a certificate for %s: %w", name, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    now.Add(-leafBackdate),
		NotAfter:     now.Add(leafLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leaf, der, err := sign(tmpl, ca.cert, ca.leafKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("making a certificate for %s: %w", name, err)
	}
	if len(ca.leaves) >= maxLeaves {
		clear(ca.leaves) // made again on demand: cheap, and rare
	}
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: ca.leafKey, Leaf: leaf}
	ca.leaves[name] = c
	return c, nil
}
