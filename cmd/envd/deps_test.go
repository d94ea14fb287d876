package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// envd is copied into every sandbox and is part of its attack surface, so
// its module list is fixed here; adding one is a decision, not an accident.
var allowedModules = []string{
	"connectrpc.com/connect",
	"github.com/agent-sandbox/agent-sandbox",
	"github.com/creack/pty",
	"github.com/fsnotify/fsnotify",
	"golang.org/x/sys",
	"google.golang.org/protobuf",
}

func TestEnvdDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if .Module}}{{.Module.Path}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, m := range strings.Fields(string(out)) {
		if !slices.Contains(allowedModules, m) {
			t.Errorf("envd depends on %s, which is not in the allowed list", m)
		}
	}
}
