//go:build linux && !amd64 && !arm64

package guest

import "golang.org/x/net/bpf"

// auditArch 0 makes loadSeccomp fail: no deny list is written for this
// architecture yet.
const (
	auditArch     = 0
	cloneFlagsArg = 0
)

var abiCheck []bpf.Instruction

var archRules []rule
