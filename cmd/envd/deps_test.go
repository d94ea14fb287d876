package main

import (
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/deptest"
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

func TestEnvdDependencies(t *testing.T) { deptest.Check(t, allowedModules, nil) }
