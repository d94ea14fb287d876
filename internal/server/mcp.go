package server

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/agent-sandbox/agent-sandbox/client"
	"github.com/agent-sandbox/agent-sandbox/internal/mcp"
	"github.com/agent-sandbox/agent-sandbox/internal/tlsca"
)

// mcpTools returns the /mcp handler. Its tools are the ones `agent-sandbox
// mcp` serves, acting through the Go SDK on this server's own listener with
// the caller's API key (see package mcp for why not on the manager): the
// header-routing address the server prints, over TLS under --tls with the
// server's CA as the only root.
func (s *Server) mcpTools() (*mcp.HTTPHandler, error) {
	scheme := "http"
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.Proxy = nil // loopback: never through a proxy from the environment
	if s.cfg.TLS {
		scheme = "https"
		ca, err := tlsca.Open(filepath.Join(s.cfg.DataDir, "tls"))
		if err != nil {
			return nil, fmt.Errorf("opening the TLS CA for /mcp: %w", err)
		}
		pem, err := os.ReadFile(ca.CertPath())
		if err != nil {
			return nil, fmt.Errorf("reading the TLS CA for /mcp: %w", err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("reading the TLS CA for /mcp: no certificate in %s", ca.CertPath())
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	}
	base := scheme + "://" + s.listenURLHost()
	h, err := mcp.NewHTTPHandler(client.Config{
		APIURL:     base,
		SandboxURL: base,
		Domain:     s.cfg.Domain,
		HTTPClient: &http.Client{Transport: transport},
	}, s.cfg.Version)
	if err != nil {
		return nil, fmt.Errorf("setting up /mcp: %w", err)
	}
	return h, nil
}
