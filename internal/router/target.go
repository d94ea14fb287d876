package router

import (
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

// Routing headers the SDKs send to the shared sandbox host.
const (
	headerSandboxID   = "E2b-Sandbox-Id"
	headerSandboxPort = "E2b-Sandbox-Port"
)

// sandboxIDFormat is the shape of a routable sandbox ID.
var sandboxIDFormat = regexp.MustCompile(`^[a-z0-9]+$`)

// target is the sandbox port a request is for.
type target struct {
	id   string
	port int
	host string // Host header for the sandbox; "" keeps the client's
	// publicWS is the client's ws(s)://host, to which the DevTools
	// port's endpoints are rewritten (devtools.go); "" for other ports.
	publicWS string
}

// routeError is a request that is for a sandbox but names it badly (400).
type routeError struct{ msg string }

func (e *routeError) Error() string { return e.msg }

// resolve says where r goes. ok is false when r is not sandbox traffic at
// all (the API's); err is a *routeError when it is, but malformed.
func (rt *Router) resolve(r *http.Request) (t target, ok bool, err error) {
	host := strings.ToLower(r.Host)
	hostname := stripPort(host)

	if headerRoutable(hostname) && (r.Header.Get(headerSandboxID) != "" || r.Header.Get(headerSandboxPort) != "") {
		t, err := fromHeaders(r.Header)
		return t, true, err
	}

	if rt.domain == "" {
		return target{}, false, nil
	}
	name := hostname
	if rt.domainHasPort {
		name = host
	}
	sub, found := strings.CutSuffix(name, "."+rt.domain)
	if !found || sub == "" {
		return target{}, false, nil
	}
	label, _, _ := strings.Cut(sub, ".")
	if label == "api" {
		return target{}, false, nil // the control plane's host
	}
	t, err = fromLabel(label)
	return t, true, err
}

// headerRoutable reports whether requests to hostname may be routed by the
// E2b-Sandbox-* headers: localhost, an IP literal, or sandbox.*.
func headerRoutable(hostname string) bool {
	if hostname == "localhost" || strings.HasPrefix(hostname, "sandbox.") {
		return true
	}
	_, err := netip.ParseAddr(hostname)
	return err == nil
}

// fromHeaders reads E2b-Sandbox-Id and E2b-Sandbox-Port; both are required.
func fromHeaders(h http.Header) (target, error) {
	id, portText := h.Get(headerSandboxID), h.Get(headerSandboxPort)
	if id == "" || portText == "" {
		return target{}, &routeError{"both " + headerSandboxID + " and " + headerSandboxPort + " headers are required"}
	}
	if !sandboxIDFormat.MatchString(id) {
		return target{}, &routeError{"invalid sandbox ID " + strconv.Quote(id) + " in " + headerSandboxID}
	}
	port, ok := parsePort(portText)
	if !ok {
		return target{}, &routeError{"invalid port " + strconv.Quote(portText) + " in " + headerSandboxPort}
	}
	return target{id: id, port: port}, nil
}

// fromLabel parses the first DNS label of a sandbox host, <port>-<id>;
// anything after a second "-" is ignored (legacy <id>-<clientID> IDs).
func fromLabel(label string) (target, error) {
	parts := strings.Split(label, "-")
	if len(parts) < 2 {
		return target{}, &routeError{"invalid sandbox host: want <port>-<sandboxID>, got " + strconv.Quote(label)}
	}
	port, ok := parsePort(parts[0])
	if !ok {
		return target{}, &routeError{"invalid port " + strconv.Quote(parts[0]) + " in the host"}
	}
	if !sandboxIDFormat.MatchString(parts[1]) {
		return target{}, &routeError{"invalid sandbox ID " + strconv.Quote(parts[1]) + " in the host"}
	}
	return target{id: parts[1], port: port}, nil
}

// parsePort accepts decimal digits only, 1..65535.
func parsePort(s string) (int, bool) {
	if s == "" || len(s) > 5 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	n, _ := strconv.Atoi(s)
	return n, n >= 1 && n <= 65535
}

// stripPort removes a :port from a host, keeping IPv6 brackets off.
func stripPort(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
}
