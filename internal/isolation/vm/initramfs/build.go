package initramfs

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation/vm/vminit"
)

// Build writes the guest's initramfs onto w: the init binary (vminit,
// static) as /init, the named kernel modules of the kernel unpacked in
// kernelDir (KernelVersion's layout) with their dependencies in
// vminit.ModulesDir, and their load order in vminit.ModulesOrder, and
// /dev/console, which the kernel opens as init's stdin, stdout and stderr.
// The archive is not compressed: under TCG the kernel's gzip
// decompression costs more boot time than reading the larger archive.
// The host appends each sandbox's configuration to it (AppendConfig).
func Build(w io.Writer, kernelDir string, init string, modules []string) error {
	v, err := KernelVersion(kernelDir)
	if err != nil {
		return err
	}
	tree, err := readModuleTree(filepath.Join(kernelDir, "lib", "modules", v))
	if err != nil {
		return err
	}
	files, err := tree.resolve(modules)
	if err != nil {
		return err
	}
	cw := NewWriter(w)
	if err := cw.CharDev("dev/console", 0o600, 5, 1); err != nil {
		return err
	}
	if err := copyFile(cw, "init", init, 0o755); err != nil {
		return err
	}
	var order strings.Builder
	for _, f := range files {
		name := filepath.Base(f)
		if err := copyFile(cw, path.Join(vminit.ModulesDir, name), f, 0o644); err != nil {
			return err
		}
		order.WriteString(name + "\n")
	}
	if err := cw.File(vminit.ModulesOrder, 0o644, strings.NewReader(order.String()), int64(order.Len())); err != nil {
		return err
	}
	return cw.Close()
}

func copyFile(cw *Writer, name, src string, perm os.FileMode) error {
	f, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("adding %s to the initramfs: %w", name, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("adding %s to the initramfs: %w", name, err)
	}
	return cw.File(name, perm, f, fi.Size())
}

// AppendConfig writes cfg as a second, tiny archive holding only
// vminit.ConfigPath (mode 0400: it holds envd's token), to be appended to
// what Build wrote; the kernel unpacks concatenated archives in order.
func AppendConfig(w io.Writer, cfg vminit.Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("guest configuration: %w", err)
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("encoding the guest configuration: %w", err)
	}
	cw := NewWriter(w)
	if err := cw.File(vminit.ConfigPath, 0o400, strings.NewReader(string(b)), int64(len(b))); err != nil {
		return err
	}
	return cw.Close()
}
