package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
)

// Where a sandbox is given the CA of its egress proxy (installEgressCA).
const (
	// egressCAFile holds the CA alone: where update-ca-certificates picks
	// it up again, and what NODE_EXTRA_CA_CERTS names.
	egressCAFile = "/usr/local/share/ca-certificates/agent-sandbox-egress.crt"
	// egressCAMarker starts the CA's block in a bundle, so that a later
	// install replaces it rather than adding another.
	egressCAMarker = "# agent-sandbox egress CA: the egress proxy terminates TLS with it for the sandbox's header rules (network.rules)\n"
	pemEnd         = "-----END CERTIFICATE-----\n"
	// maxBundle bounds a trust store read back from a sandbox (Debian's
	// is about 220 KB).
	maxBundle = 8 << 20
)

// caBundles are the system trust stores OpenSSL, GnuTLS, Go and Python's
// ssl read: Debian, Ubuntu and Alpine's first, then Fedora and RHEL's.
var caBundles = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"}

// installEgressCA makes a sandbox trust pemCert, the CA its egress proxy
// signs with when it terminates TLS to apply header rules. It works the
// same on every backend: through envd's file API, as root, presenting
// token, before /init, so that the template's service and everything the
// sandbox runs later see it. The CA's key never leaves the host. The
// certificate goes into each system trust store the template has (a block
// of its own, replaced if there is one, so that a resumed sandbox does not
// gather copies), into caBundles[0] made for it when the template has none,
// and into egressCAFile. It returns env vars for the runtimes with roots
// of their own: Node (NODE_EXTRA_CA_CERTS) and Python's requests
// (REQUESTS_CA_BUNDLE, when the template has a system trust store).
func installEgressCA(ctx context.Context, inst isolation.Instance, token string, pemCert []byte) (map[string]string, error) {
	c := envdFiles{client: envdClient(inst), token: token}
	if err := c.write(ctx, egressCAFile, pemCert); err != nil {
		return nil, err
	}
	env := map[string]string{"NODE_EXTRA_CA_CERTS": egressCAFile}
	for _, path := range caBundles {
		bundle, found, err := c.read(ctx, path)
		if err != nil {
			return nil, err
		}
		if !found {
			continue
		}
		if err := c.write(ctx, path, withEgressCA(bundle, pemCert)); err != nil {
			return nil, err
		}
		if env["REQUESTS_CA_BUNDLE"] == "" {
			env["REQUESTS_CA_BUNDLE"] = path
		}
	}
	if env["REQUESTS_CA_BUNDLE"] == "" {
		if err := c.write(ctx, caBundles[0], withEgressCA(nil, pemCert)); err != nil {
			return nil, err
		}
	}
	return env, nil
}

// withEgressCA returns bundle with its egress CA block, if any, replaced
// by one of pemCert.
func withEgressCA(bundle, pemCert []byte) []byte {
	if i := bytes.Index(bundle, []byte(egressCAMarker)); i >= 0 {
		rest := bundle[i:]
		if j := bytes.Index(rest, []byte(pemEnd)); j >= 0 {
			bundle = append(bundle[:i:i], rest[j+len(pemEnd):]...)
		}
	}
	out := bytes.Clone(bundle)
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	out = append(out, egressCAMarker...)
	return append(out, pemCert...)
}

// envdFiles reads and writes files in a sandbox as root through envd's
// /files.
type envdFiles struct {
	client *http.Client
	token  string
}

func (c envdFiles) do(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	q := url.Values{"path": {path}, "username": {"root"}}
	req, err := http.NewRequestWithContext(ctx, method, "http://envd/files?"+q.Encode(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-Access-Token", c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s /files %s: %w", method, path, err)
	}
	return resp, nil
}

// read returns the file at path; found is false if there is none.
func (c envdFiles) read(ctx context.Context, path string) (data []byte, found bool, err error) {
	resp, err := c.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, false, nil
	default:
		return nil, false, envdError(http.MethodGet, path, resp)
	}
	data, err = io.ReadAll(io.LimitReader(resp.Body, maxBundle+1))
	if err != nil {
		return nil, false, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(data) > maxBundle {
		return nil, false, fmt.Errorf("reading %s: larger than %d bytes", path, maxBundle)
	}
	return data, true, nil
}

// write replaces the file at path with data, making its directories.
func (c envdFiles) write(ctx context.Context, path string, data []byte) error {
	resp, err := c.do(ctx, http.MethodPost, path, data)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return envdError(http.MethodPost, path, resp)
	}
	return nil
}

func envdError(method, path string, resp *http.Response) error {
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	return fmt.Errorf("%s /files %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(msg))
}
