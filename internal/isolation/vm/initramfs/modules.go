package initramfs

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Modules are the kernel modules the guest needs that Debian's cloud
// kernel builds as modules (ext4, crc32c and the pids cgroup are built
// in): virtio over MMIO, which QEMU's microvm machine and Firecracker
// both offer, its block and network drivers, the balloon (only for its
// free page reporting: the guest hands the host back the memory it
// frees), and the nftables NAT that forwards the host side's connections
// to the guest's loopback (package vminit). Build adds their dependencies.
var Modules = []string{"virtio_mmio", "virtio_blk", "virtio_net", "virtio_balloon", "nf_tables", "nft_chain_nat", "nft_nat"}

// KernelVersion is the version of the kernel unpacked in dir, a Debian
// linux-image package's layout (boot/vmlinuz-<version>,
// lib/modules/<version>/): the one directory under lib/modules.
func KernelVersion(dir string) (string, error) {
	entries, err := os.ReadDir(filepath.Join(dir, "lib", "modules"))
	if err != nil {
		return "", fmt.Errorf("finding the kernel's modules: %w", err)
	}
	var versions []string
	for _, e := range entries {
		if e.IsDir() {
			versions = append(versions, e.Name())
		}
	}
	if len(versions) != 1 {
		return "", fmt.Errorf("finding the kernel's modules: want one version in %s/lib/modules, found %q", dir, versions)
	}
	return versions[0], nil
}

// KernelImage is the path of the kernel unpacked in dir (KernelVersion).
func KernelImage(dir string) (string, error) {
	v, err := KernelVersion(dir)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "boot", "vmlinuz-"+v), nil
}

// moduleTree indexes a kernel's modules (lib/modules/<version>): the file
// of each module by name, and the names built into the kernel.
type moduleTree struct {
	files   map[string]string // name → path
	builtin map[string]bool
}

// modName is a module's name as the kernel and depends= spell it: the file
// name without .ko, with - as _.
func modName(file string) string {
	return strings.ReplaceAll(strings.TrimSuffix(filepath.Base(file), ".ko"), "-", "_")
}

func readModuleTree(dir string) (*moduleTree, error) {
	t := &moduleTree{files: map[string]string{}, builtin: map[string]bool{}}
	err := filepath.WalkDir(filepath.Join(dir, "kernel"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".ko") {
			t.files[modName(p)] = p
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing the kernel's modules: %w", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "modules.builtin"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("reading modules.builtin: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			t.builtin[modName(l)] = true
		}
	}
	return t, nil
}

// resolve returns the files of names and of everything they depend on,
// in an order that loads each module after its dependencies. Built-in
// names are left out.
func (t *moduleTree) resolve(names []string) ([]string, error) {
	var order []string
	state := map[string]int{} // 1: being visited, 2: done
	var visit func(name, from string, optional bool) error
	visit = func(name, from string, optional bool) error {
		switch {
		case state[name] == 2 || t.builtin[name]:
			return nil
		case state[name] == 1:
			return fmt.Errorf("module %s: dependency cycle through %s", from, name)
		}
		file, ok := t.files[name]
		if !ok && optional {
			return nil // an alias (crc32c), or not built for this kernel
		}
		if !ok {
			if from != "" {
				return fmt.Errorf("module %s (needed by %s) is neither a module nor built in", name, from)
			}
			return fmt.Errorf("module %s is neither a module nor built in", name)
		}
		state[name] = 1
		deps, soft, err := moduleDeps(file)
		if err != nil {
			return err
		}
		for _, d := range deps {
			if err := visit(d, name, false); err != nil {
				return err
			}
		}
		for _, d := range soft {
			if err := visit(d, name, true); err != nil {
				return err
			}
		}
		state[name] = 2
		order = append(order, file)
		return nil
	}
	for _, n := range names {
		if err := visit(modName(n), "", false); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// moduleDeps reads what a module needs loaded first from its .modinfo
// section (NUL-separated key=value strings, as modinfo(8) shows them):
// depends= (deps), and the pre: modules of softdep= (soft), which modprobe
// loads first when it finds them. There is no modules.dep to read (the
// kernel is unpacked, not installed, and depmod is not on every host).
func moduleDeps(file string) (deps, soft []string, err error) {
	f, err := elf.Open(file)
	if err != nil {
		return nil, nil, fmt.Errorf("reading module %s: %w", filepath.Base(file), err)
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, nil, fmt.Errorf("reading module %s: no .modinfo section", filepath.Base(file))
	}
	data, err := sec.Data()
	if err != nil {
		return nil, nil, fmt.Errorf("reading module %s's .modinfo: %w", filepath.Base(file), err)
	}
	for _, kv := range bytes.Split(data, []byte{0}) {
		k, v, _ := strings.Cut(string(kv), "=")
		switch k {
		case "depends":
			for _, d := range strings.Split(v, ",") {
				if d != "" {
					deps = append(deps, modName(d))
				}
			}
		case "softdep":
			soft = append(soft, softdepPre(v)...)
		}
	}
	return deps, soft, nil
}

// softdepPre is the pre: part of a softdep value ("pre: a b post: c").
func softdepPre(v string) []string {
	var pre []string
	in := false
	for _, f := range strings.Fields(v) {
		switch f {
		case "pre:":
			in = true
		case "post:":
			in = false
		default:
			if in {
				pre = append(pre, modName(f))
			}
		}
	}
	return pre
}
