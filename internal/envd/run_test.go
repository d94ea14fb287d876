package envd

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestRunHelpDocumentsEveryFlag(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := Run(context.Background(), []string{"--help"}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"-addr", "0.0.0.0:49983", "-default-user", "-default-workdir", "-version"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, stdout.String())
		}
	}
}

func TestRunVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := Run(context.Background(), []string{"--version"}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(stdout.String()); got != Version {
		t.Errorf("--version printed %q, want %q", got, Version)
	}
}

func TestRunRejectsStrayArguments(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := Run(context.Background(), []string{"serve"}, &stdout, &stderr); err == nil {
		t.Error("Run accepted a stray argument")
	}
}

func TestRunHelpGoesToStdoutOnly(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := Run(context.Background(), []string{"-h"}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if stderr.Len() != 0 || !strings.HasPrefix(stdout.String(), "Usage: envd") {
		t.Errorf("stdout %q, stderr %q; want the usage on stdout only", stdout.String(), stderr.String())
	}
	err := Run(context.Background(), []string{"--nope"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "--help") {
		t.Errorf("unknown flag: error %v, want one pointing at --help", err)
	}
}
