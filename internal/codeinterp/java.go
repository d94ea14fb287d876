package codeinterp

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// kernelJava is the program the Java runtime runs: a JShell session.
//
//go:embed java/Kernel.java
var kernelJava []byte

// JavaFactory returns a Factory of Java runtimes: java/Kernel.java, written
// to dir, run from source by java (Java 11 or later: JShell and the source
// launcher come with the runtime's jdk.jshell and jdk.compiler modules, so
// a JRE without javac is enough).
//
// The JVM runs in the context's working directory, so user.dir, relative
// paths and child processes all start there; the official server only
// sets the user.dir property.
func JavaFactory(java, dir string) (Factory, error) {
	src := filepath.Join(dir, "Kernel.java")
	if err := os.WriteFile(src, kernelJava, 0o644); err != nil {
		return nil, fmt.Errorf("writing the Java kernel: %w", err)
	}
	return func(ctx context.Context, cwd string) (Runtime, error) {
		cmd := exec.Command(java, src)
		cmd.Dir = cwd
		return startProcess(ctx, "java", cmd, nil)
	}, nil
}
