package server

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/gvisor"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/vm"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
)

// The choices of Config.Backend (serve --backend).
const (
	BackendAuto   = "auto" // backendOrder's first that can be set up
	BackendJail   = "jail"
	BackendGvisor = "gvisor"
	BackendVM     = "vm"
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
	BackendGvisor: func(cfg Config, log *slog.Logger, host *network.Host) (isolation.Backend, error) {
		return gvisor.New(gvisorConfig(cfg, log, host))
	},
	BackendVM: func(cfg Config, log *slog.Logger, host *network.Host) (isolation.Backend, error) {
		return vm.New(vmConfig(cfg, log, host))
	},
}

// backendOrder resolves choice (a Config.Backend) to the backends that
// may start new sandboxes, preferred first: the first that can be set up
// is chosen. auto prefers a VM where KVM is usable (kvm), then the jail;
// any other choice is that backend alone. gVisor is not in auto's order
// yet: on runsc 2022 its sandboxes lack what the templates promise and
// the API offers on the jail (setuid, so sudo; snapshots, so fork and
// file-system pause), so it is there on request (docs/SECURITY.md).
func backendOrder(choice string, kvm bool) ([]string, error) {
	if choice == BackendAuto {
		if kvm {
			return []string{BackendVM, BackendJail}, nil
		}
		return []string{BackendJail}, nil
	}
	if _, built := backendMakers[choice]; built {
		return []string{choice}, nil
	}
	return nil, fmt.Errorf("--backend %q: want auto, %s", choice, joinOr(slices.Sorted(maps.Keys(backendMakers))))
}

// joinOr joins names as "a, b or c".
func joinOr(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// newBackends builds every backend this server is built with, and returns
// the one cfg.Backend chooses, which starts new sandboxes, and the others,
// which adopt and manage the sandboxes earlier runs started with them. A
// backend that cannot be set up on this host is only a warning unless it
// was the one asked for: its sandboxes are then recorded lost.
func newBackends(cfg Config, log *slog.Logger, host *network.Host) (isolation.Backend, []isolation.Backend, error) {
	kvm := vm.DetectKVM()
	order, err := backendOrder(cfg.Backend, kvm.Usable)
	if err != nil {
		return nil, nil, err
	}
	built := map[string]isolation.Backend{}
	failed := map[string]error{}
	for _, name := range slices.Sorted(maps.Keys(backendMakers)) {
		b, err := backendMakers[name](cfg, log.With("component", name), host)
		if err != nil {
			failed[name] = err
			continue
		}
		built[name] = b
	}
	for tmpl, name := range cfg.TemplateBackends {
		if err := failed[name]; err != nil {
			return nil, nil, fmt.Errorf("setting up the %s backend, which --template-backend names for %s: %w", name, tmpl, err)
		}
	}
	var chosen string
	var passed []any
	for _, name := range order {
		if built[name] != nil {
			chosen = name
			break
		}
		passed = append(passed, "not_"+name, failed[name].Error())
	}
	if chosen == "" {
		var errs []error
		for _, name := range order {
			errs = append(errs, fmt.Errorf("setting up the %s backend: %w", name, failed[name]))
		}
		return nil, nil, errors.Join(errs...)
	}
	if cfg.Backend == BackendAuto && !kvm.Usable {
		passed = append([]any{"not_vm", "no usable KVM: " + kvm.Why}, passed...)
	}
	log.Info("isolation backend chosen", append([]any{"backend", chosen, "choice", cfg.Backend}, passed...)...)
	var others []isolation.Backend
	for _, name := range slices.Sorted(maps.Keys(backendMakers)) {
		switch {
		case name == chosen:
		case built[name] != nil:
			others = append(others, built[name])
		default:
			log.Warn("backend not available: its sandboxes from earlier runs will not be adopted", "backend", name, "err", failed[name])
		}
	}
	return built[chosen], others, nil
}

// sandboxesDir holds the jail's per-sandbox directories and disk images.
func sandboxesDir(cfg Config) string { return filepath.Join(cfg.DataDir, "sandboxes") }

// backendConfig is the jail backend's configuration for cfg.
func backendConfig(cfg Config, log *slog.Logger, host *network.Host) jail.Config {
	return jail.Config{
		StateDir:   sandboxesDir(cfg),
		Log:        log,
		InitPath:   cfg.JailInit,
		Network:    host,
		Userns:     jail.UsernsMode(cfg.Userns),
		NoNewPrivs: cfg.NoNewPrivs,
	}
}

// gvisorConfig is the gvisor backend's configuration for cfg.
func gvisorConfig(cfg Config, log *slog.Logger, host *network.Host) gvisor.Config {
	return gvisor.Config{
		StateDir:   filepath.Join(cfg.DataDir, "gvisor"),
		Log:        log,
		Network:    host,
		Init:       cfg.GvisorInit,
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
