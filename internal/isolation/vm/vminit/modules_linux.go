package vminit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// loadModules loads the initramfs' modules in the order ModulesOrder
// lists them (the builder put dependencies first), then deletes them: the
// initramfs stays in the guest's memory.
func loadModules() error {
	b, err := os.ReadFile(ModulesOrder)
	if errors.Is(err, os.ErrNotExist) {
		return nil // a kernel with everything built in
	}
	if err != nil {
		return fmt.Errorf("reading the module list: %w", err)
	}
	for _, name := range strings.Fields(string(b)) {
		if err := loadModule(filepath.Join(ModulesDir, name)); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(ModulesDir); err != nil {
		return fmt.Errorf("removing the modules: %w", err)
	}
	return nil
}

func loadModule(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("loading module: %w", err)
	}
	defer f.Close()
	err = unix.FinitModule(int(f.Fd()), "", 0)
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("loading module %s: %w", filepath.Base(path), err)
	}
	return nil
}
