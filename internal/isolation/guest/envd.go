package guest

import "strconv"

// EnvdPath is where envd appears inside every sandbox, whatever the
// backend.
const EnvdPath = "/usr/bin/envd"

// EnvdTokenFd is the descriptor envd reads its access token from
// (envd --access-token-fd): the read end of a pipe its starter fills, so
// that the token is in no command line or environment that a process in
// the sandbox can read, and envd requires it from its first request.
const EnvdTokenFd = 3

// EnvdLogLimit caps how much of envd's output a sandbox's init copies to
// the host (its log, or the VM's console), since envd's output is partly
// sandbox-controlled.
const EnvdLogLimit = 8 << 20

// envdEnv is envd's environment: nothing of its starter's.
var envdEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}

// Envd is how envd is started in a sandbox.
type Envd struct {
	// Args are envd's arguments after the binary path.
	Args []string
	// Token is envd's access token; empty: none.
	Token string
}

// Argv is envd's command line: its arguments and, when it has an access
// token, where to read it.
func (e Envd) Argv() []string {
	argv := append([]string{EnvdPath}, e.Args...)
	if e.Token != "" {
		argv = append(argv, "--access-token-fd", strconv.Itoa(EnvdTokenFd))
	}
	return argv
}

// Env is envd's environment.
func (e Envd) Env() []string { return append([]string(nil), envdEnv...) }
