package server

import (
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/vm"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
)

// The choices of Config.Backend (serve --backend).
const (
	BackendAuto = "auto" // vm where /dev/kvm is usable, else jail
	BackendJail = "jail"
	BackendVM   = "vm"
)

// backendMaker builds one isolation backend over the server's host
// networking.
type backendMaker func(cfg Config, log *slog.Logger, host *network.Host) (isolation.Backend, error)

// backendMakers are the isolation backends this server is built with, by
// name: a new backend is one entry here.
var backendMakers = map[string]backendMaker{
	BackendJail: func(cfg Config, log *slog.Logger, host *network.Host) (isolation.Backend, error) {
		return jail.New(backendConfig(cfg, log, host))
	},
	BackendVM: func(cfg Config, log *slog.Logger, host *network.Host) (isolation.Backend, error) {
		return vm.New(vmConfig(cfg, log, host))
	},
}

// chooseBackend resolves choice (a Config.Backend) to a built backend's
// name; kvm says whether /dev/kvm is usable here.
func chooseBackend(choice string, kvm bool) (string, error) {
	if choice == BackendAuto {
		if kvm {
			return BackendVM, nil
		}
		return BackendJail, nil
	}
	if _, built := backendMakers[choice]; built {
		return choice, nil
	}
	return "", fmt.Errorf("--backend %q: want auto, jail or vm", choice)
}

// newBackends builds the backend cfg.Backend chooses, which starts new
// sandboxes, and every other backend built in, which adopt and manage
// the sandboxes earlier runs started with them. Another backend that
// cannot be set up on this host is only a warning: its sandboxes are
// then recorded lost.
func newBackends(cfg Config, log *slog.Logger, host *network.Host) (isolation.Backend, []isolation.Backend, error) {
	kvm := vm.DetectKVM()
	name, err := chooseBackend(cfg.Backend, kvm.Usable)
	if err != nil {
		return nil, nil, err
	}
	if cfg.Backend == BackendAuto && !kvm.Usable {
		log.Info("no usable KVM: auto chooses the jail", "why", kvm.Why)
	}
	chosen, err := backendMakers[name](cfg, log.With("component", name), host)
	if err != nil {
		return nil, nil, fmt.Errorf("setting up the %s backend: %w", name, err)
	}
	log.Info("isolation backend chosen", "backend", name, "choice", cfg.Backend)
	var others []isolation.Backend
	for _, other := range slices.Sorted(maps.Keys(backendMakers)) {
		if other == name {
			continue
		}
		b, err := backendMakers[other](cfg, log.With("component", other), host)
		if err != nil && slices.Contains(slices.Collect(maps.Values(cfg.TemplateBackends)), other) {
			return nil, nil, fmt.Errorf("setting up the %s backend, which --template-backend names: %w", other, err)
		}
		if err != nil {
			log.Warn("backend not available: its sandboxes from earlier runs will not be adopted", "backend", other, "err", err)
			continue
		}
		others = append(others, b)
	}
	return chosen, others, nil
}

// sandboxesDir holds the jail's per-sandbox directories and disk images.
func sandboxesDir(cfg Config) string { return filepath.Join(cfg.DataDir, "sandboxes") }

// backendConfig is the jail backend's configuration for cfg.
func backendConfig(cfg Config, log *slog.Logger, host *network.Host) jail.Config {
	return jail.Config{
		StateDir:   sandboxesDir(cfg),
		Log:        log,
		Network:    host,
		Userns:     jail.UsernsMode(cfg.Userns),
		NoNewPrivs: cfg.NoNewPrivs,
	}
}

// vmConfig is the vm backend's configuration for cfg.
func vmConfig(cfg Config, log *slog.Logger, host *network.Host) vm.Config {
	return vm.Config{
		StateDir:   filepath.Join(cfg.DataDir, "vms"),
		CacheDir:   filepath.Join(cfg.DataDir, "vm-boot"),
		Log:        log,
		Network:    host,
		KernelDir:  cfg.VMKernel,
		Init:       cfg.VMInit,
		NoNewPrivs: cfg.NoNewPrivs,
		Snapshots:  !cfg.VMColdBoot,
	}
}
