package gvisor

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

// TestStatxShim preloads the shim into the host's stat(1) and ls(1): the
// answers are the same as without it, errors included, so its statx
// passes every argument but the flag through and sets errno. (That the
// flag goes is what TestSandbox's "userland" shows, under the runsc that
// refuses it.)
func TestStatxShim(t *testing.T) {
	so := filepath.Join(t.TempDir(), "shim.so")
	if err := os.WriteFile(so, statxShim(), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(so)
	if err != nil {
		t.Fatalf("the shim is not an ELF object debug/elf reads: %v", err)
	}
	if f.Type != elf.ET_DYN || f.Machine != elf.EM_X86_64 || len(f.Progs) != 4 {
		t.Errorf("shim: type %s, machine %s, %d program headers", f.Type, f.Machine, len(f.Progs))
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_GNU_STACK && p.Flags&elf.PF_X != 0 {
			t.Error("the shim asks for an executable stack")
		}
	}
	f.Close()
	// Positive control: the dynamic linker binds stat's statx to the shim.
	cmd := exec.Command("stat", "-c", "%s", so)
	cmd.Env = []string{"LD_PRELOAD=" + so, "LD_DEBUG=bindings"}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "to "+so+" [0]: normal symbol `statx'") {
		t.Fatalf("stat's statx is not bound to the shim (%v):\n%s", err, out)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "file"), []byte("twelve bytes"), 0o640); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"stat", "-c", "%s %a %F", filepath.Join(dir, "file")},
		{"stat", "-L", "-c", "%s", "/proc/self/exe"},
		{"ls", "-l", dir},
		{"stat", filepath.Join(dir, "missing")},
	} {
		_, err := exec.LookPath(args[0])
		testenv.Require(t, err == nil, args[0]+" on the host")
		run := func(preload string) string {
			cmd := exec.Command(args[0], args[1:]...)
			cmd.Dir = dir
			cmd.Env = []string{"LC_ALL=C", "LD_PRELOAD=" + preload}
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			return out.String() + "; " + errString(err)
		}
		without, with := run(""), run(so)
		if with != without {
			t.Errorf("%s: with the shim %q, without %q", strings.Join(args, " "), with, without)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}
