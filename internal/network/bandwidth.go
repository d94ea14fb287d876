package network

// Bandwidth caps a sandbox's traffic in bits per second; 0 means unlimited.
type Bandwidth struct {
	Down uint64 // to the sandbox (host end egress)
	Up   uint64 // from the sandbox (host end ingress)
}
