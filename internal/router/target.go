package router

import (
	"fmt"
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

// Route is the sandbox port a request names.
type Route struct {
	SandboxID string
	Port      int
}

// Routes tells sandbox traffic from the API's by the rules of E2B's
// sandbox hosts: the E2b-Sandbox-* headers on a header-routable Host, or a
// Host <port>-<sandboxID>.<domain>. The router routes by them, and so does
// an API replica of cluster mode, which forwards what they match to the
// sandbox's node.
type Routes struct {
	domain        string // lower case, no trailing dot
	domainHasPort bool
}

// NewRoutes returns the routes of the sandbox domain D of <port>-<id>.D
// hosts; it may carry a port ("example.test:8443"). An empty domain
// routes by headers only.
func NewRoutes(domain string) (Routes, error) {
	rs := Routes{domain: strings.TrimSuffix(strings.ToLower(domain), ".")}
	if strings.ContainsAny(rs.domain, "/ ") || strings.HasPrefix(rs.domain, ".") {
		return Routes{}, fmt.Errorf("router: invalid domain %q", domain)
	}
	if _, _, err := net.SplitHostPort(rs.domain); err == nil {
		rs.domainHasPort = true
	}
	return rs, nil
}

// routeError is a request that is for a sandbox but names it badly (400).
type routeError struct{ msg string }

func (e *routeError) Error() string { return e.msg }

// Resolve says where r goes. ok is false when r is not sandbox traffic at
// all (the API's); an error says that it is, but malformed (Refuse
// answers it with 400).
func (rs Routes) Resolve(r *http.Request) (rt Route, ok bool, err error) {
	host := strings.ToLower(r.Host)
	hostname := stripPort(host)

	if headerRoutable(hostname) && (r.Header.Get(headerSandboxID) != "" || r.Header.Get(headerSandboxPort) != "") {
		rt, err := fromHeaders(r.Header)
		return rt, true, err
	}

	if rs.domain == "" {
		return Route{}, false, nil
	}
	name := hostname
	if rs.domainHasPort {
		name = host
	}
	sub, found := strings.CutSuffix(name, "."+rs.domain)
	if !found || sub == "" {
		return Route{}, false, nil
	}
	label, _, _ := strings.Cut(sub, ".")
	if label == "api" {
		return Route{}, false, nil // the control plane's host
	}
	rt, err = fromLabel(label)
	return rt, true, err
}

// Match reports whether r is sandbox traffic, well formed or not.
func (rs Routes) Match(r *http.Request) bool {
	_, ok, _ := rs.Resolve(r)
	return ok
}

// resolve is Resolve for the router, as a target.
func (rt *Router) resolve(r *http.Request) (target, bool, error) {
	route, ok, err := rt.routes.Resolve(r)
	return target{id: route.SandboxID, port: route.Port}, ok, err
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
func fromHeaders(h http.Header) (Route, error) {
	id, portText := h.Get(headerSandboxID), h.Get(headerSandboxPort)
	if id == "" || portText == "" {
		return Route{}, &routeError{"both " + headerSandboxID + " and " + headerSandboxPort + " headers are required"}
	}
	if !sandboxIDFormat.MatchString(id) {
		return Route{}, &routeError{"invalid sandbox ID " + strconv.Quote(id) + " in " + headerSandboxID}
	}
	port, ok := parsePort(portText)
	if !ok {
		return Route{}, &routeError{"invalid port " + strconv.Quote(portText) + " in " + headerSandboxPort}
	}
	return Route{SandboxID: id, Port: port}, nil
}

// fromLabel parses the first DNS label of a sandbox host, <port>-<id>;
// anything after a second "-" is ignored (legacy <id>-<clientID> IDs).
func fromLabel(label string) (Route, error) {
	parts := strings.Split(label, "-")
	if len(parts) < 2 {
		return Route{}, &routeError{"invalid sandbox host: want <port>-<sandboxID>, got " + strconv.Quote(label)}
	}
	port, ok := parsePort(parts[0])
	if !ok {
		return Route{}, &routeError{"invalid port " + strconv.Quote(parts[0]) + " in the host"}
	}
	if !sandboxIDFormat.MatchString(parts[1]) {
		return Route{}, &routeError{"invalid sandbox ID " + strconv.Quote(parts[1]) + " in the host"}
	}
	return Route{SandboxID: parts[1], Port: port}, nil
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
