# agent-sandbox build and test entry points. `make test` is the whole suite;
# .ci/run calls it on a fresh clone.
SHELL    := /bin/bash
GO       ?= go
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X github.com/agent-sandbox/agent-sandbox/internal/cli.version=$(VERSION)
BUF      := $(GO) run github.com/bufbuild/buf/cmd/buf@v1.75.0
STATICCHECK := $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: dashboard-vendor build serve test test-go test-sdk test-sdk-vm test-sdk-gvisor test-recovery test-cluster kube-tools bench-cluster bench-smoke deps deps-test generate lint bench-envd clean

## build: bin/agent-sandbox and bin/envd, both static
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/ ./cmd/...

## dashboard-vendor: the npm packages the dashboard embeds (its terminal is
## xterm.js), fetched from the registry and unpacked into
## internal/api/dashboard/static/vendor, which is committed: the server builds and
## runs without npm. Run it after changing a version here.
XTERM_VERSION := 6.0.0
DASHBOARD_VENDOR := internal/api/dashboard/static/vendor
dashboard-vendor:
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	  npm pack --silent --pack-destination "$$tmp" @xterm/xterm@$(XTERM_VERSION) >/dev/null && \
	  tar -xzf "$$tmp"/xterm-xterm-$(XTERM_VERSION).tgz -C "$$tmp" && \
	  mkdir -p $(DASHBOARD_VENDOR) && \
	  cp "$$tmp"/package/lib/xterm.js "$$tmp"/package/css/xterm.css $(DASHBOARD_VENDOR)/ && \
	  cp "$$tmp"/package/LICENSE $(DASHBOARD_VENDOR)/xterm.LICENSE && \
	  sed -i '\|^//# sourceMappingURL=|d' $(DASHBOARD_VENDOR)/xterm.js && \
	  printf '%s\n' '@xterm/xterm $(XTERM_VERSION) (MIT, see xterm.LICENSE), from the npm registry by `make dashboard-vendor`.' > $(DASHBOARD_VENDOR)/README

## serve: the server on its embedded defaults (needs root); the first start
## builds the base template, with progress
serve: deps build
	bin/agent-sandbox serve

## test: everything — Go unit and root tests, the official-SDK suite, the
## crash-recovery tests, then a smoke run of the benchmark. CI runs it with
## CI=true (.ci/run): a test that lacks what it needs then fails, never skips.
test: deps-test build test-go test-sdk test-sdk-vm test-sdk-gvisor test-recovery test-cluster bench-smoke

## test-go: the Go tests; then the security suite on its own, verbose, so that
## its table of attacks and their containment is printed (without -race: the
## harness is not what it tests, and it runs twice as long). test/recovery runs
## in test-recovery. test/egress and test/security run on each backend, as
## subtests: TestEgress/jail, .../vm and .../gvisor; TestAttacks/jail_userns_on,
## .../jail_userns_off, and .../vm and .../gvisor for the escape and resource
## cases (emulated VMs, gVisor's ptrace platform: some two to four minutes each).
## test/cluster runs in test-cluster.
test-go:
	$(GO) test -race -count=1 -timeout 45m $$($(GO) list ./... | grep -v -e /test/security -e /test/recovery -e /test/cluster)
	$(GO) test -count=1 -timeout 30m -v ./test/security/ 2>&1 | grep -v -e '^=== ' -e 'level=INFO'; exit $${PIPESTATUS[0]}

## seed_base links the complete base templates (those with a template.json)
## under data dir $(1) into data dir $(2), with hard links, so that a server
## there does not build base again; seed_template does the same for template
## $(3).
seed_base = $(call seed_template,$(1),$(2),base)
define seed_template
	@mkdir -p $(2)/templates/$(3)
	@for t in $(1)/templates/$(3)/*/template.json; do \
	  d=$${t%/template.json}; \
	  [ -f "$$t" ] && [ ! -e $(2)/templates/$(3)/$${d##*/} ] || continue; \
	  echo "$@: linking template $$d"; cp -al "$$d" $(2)/templates/$(3)/; \
	done
endef

## test-sdk: the official-SDK suite against a real server. Its data dir is
## seeded with hard links to the base template TestBuildBase built into the
## Go tests' cache (same spec, same version directory), and to the browser
## template test/egress built there, so that CI builds each once; only a
## complete template (with its template.json) is linked.
TEST_CACHE ?= $(or $(AGENT_SANDBOX_TEST_CACHE),/var/cache/agent-sandbox-test)
test-sdk: deps-test build
	$(call seed_base,$(TEST_CACHE),$(SDK_DATA_DIR))
	$(call seed_template,$(TEST_CACHE),$(SDK_DATA_DIR),browser)
	node test/sdk/run.mjs

## test-sdk-vm: the SDK core subset and the lifecycle files (test/sdk/run.mjs,
## BACKEND_FILES.vm: fork, snapshots, pauses, volumes) against `serve --backend
## vm`, header routing only: 1.5 to 2.5 minutes of emulated VMs on 2 cores.
## Its data dir is its own, seeded like test-sdk's with hard links to the Go
## tests' base template; the server makes the template's ext4 image there.
SDK_VM_DATA_DIR ?= $(or $(AGENT_SANDBOX_TEST_VM_DATA_DIR),/var/lib/agent-sandbox-sdk-test-vm)
test-sdk-vm: deps-test build
	$(call seed_base,$(TEST_CACHE),$(SDK_VM_DATA_DIR))
	SDK_TEST_BACKEND=vm AGENT_SANDBOX_TEST_VM_DATA_DIR=$(SDK_VM_DATA_DIR) node test/sdk/run.mjs server

## test-sdk-gvisor: the same SDK core subset and the code interpreter file
## against `serve --backend gvisor`, header routing only, on a data dir of its
## own seeded the same way, and with the code-interpreter-v1 template test-sdk
## built (run alone, the server builds it first).
SDK_GVISOR_DATA_DIR ?= $(or $(AGENT_SANDBOX_TEST_GVISOR_DATA_DIR),/var/lib/agent-sandbox-sdk-test-gvisor)
test-sdk-gvisor: deps-test build
	$(call seed_base,$(TEST_CACHE),$(SDK_GVISOR_DATA_DIR))
	$(call seed_template,$(SDK_DATA_DIR),$(SDK_GVISOR_DATA_DIR),code-interpreter-v1)
	SDK_TEST_BACKEND=gvisor AGENT_SANDBOX_TEST_GVISOR_DATA_DIR=$(SDK_GVISOR_DATA_DIR) node test/sdk/run.mjs server

## test-recovery: test/recovery, real servers: one killed with SIGKILL while
## its sandboxes run, then restarted, on the jail and on the vm backend; VMs
## ended by a guest panic, an OOM kill, a crash of QEMU and a timeout (about
## a minute in all on two cores, VMs emulated). After test-sdk, whose base
## template it links into its own data dirs, as bench-smoke does; run alone,
## it has the server build base first (minutes, hence the timeout).
test-recovery:
	$(GO) test -count=1 -timeout 30m -v ./test/recovery/

## kube-tools: kube-apiserver for test-cluster, built from tools/kube at the
## k8s.io/kubernetes version its go.mod pins, into a cache keyed by version
## (scripts/kube-tools.sh; $$AGENT_SANDBOX_KUBE_CACHE, default
## /var/cache/agent-sandbox/kube); etcd is Debian's (deps-test). The first
## build takes 8 to 10 minutes of two cores and 2.8 GB; later runs reuse it.
kube-tools:
	scripts/kube-tools.sh >/dev/null

## test-cluster: test/cluster against a real kube-apiserver and etcd on
## loopback (internal/cluster/kubetest): the kustomize base of
## deploy/kubernetes applied server-side, its RBAC role by role, kubectl
## listing a Sandbox, the node agent's Lease renewed and expiring, and a real
## serve --cluster kubernetes running the Sandboxes placed on it (its data dir
## seeded with the base template test-sdk built, as test-recovery's), and three
## real nodes on stand-in hosts (network and mount namespaces) with two API
## replicas driven by the official E2B SDK of test/sdk (deps-test installs it):
## a replica and a node killed on the way, test/sdk's core server files
## (lifecycle, router, ports) through the replicas, and a smoke run of the
## bench's cluster figures (TestBenchCluster). About 7 min once
## kube-tools has built (its first build, on a fresh machine, is some 8 to 10
## minutes on 2 cores; then cached), plus any wait for the host lock.
test-cluster: deps-test kube-tools
	env $$(scripts/kube-tools.sh --print) $(GO) test -count=1 -timeout 20m -v ./test/cluster/

## bench-cluster: the bench's cluster figures (create→ready through an API
## replica with warm pools on the nodes and without, creates/s at c=50 across
## three nodes) beside its single-host figures and baselines, in one run with
## the full sample counts: test/cluster's TestBenchCluster, which test-cluster
## runs as a smoke run, on the same stand-in cluster. About 15 min.
bench-cluster: kube-tools
	env $$(scripts/kube-tools.sh --print) AGENT_SANDBOX_BENCH_FULL=1 $(GO) test -count=1 -timeout 60m -v -run '^TestBenchCluster$$' ./test/cluster/

## bench-smoke: `agent-sandbox bench --quick`, so the benchmark cannot rot. It
## fails when the bench cannot measure, never on a figure. Its data dir is its
## own (two servers must not share a database), seeded with hard links to the
## base templates the SDK suite built, so it does not debootstrap again; only
## complete templates (those with a template.json) are linked. The vm and the
## gvisor figures' servers use $(BENCH_DATA_DIR)-vm and -gvisor, which the
## bench seeds from it the same way.
## --wait-host: run by hand beside other tests, a server start waits for the
## host's sandbox networking rather than failing the run (in CI nothing else
## holds it).
SDK_DATA_DIR   ?= $(or $(AGENT_SANDBOX_TEST_DATA_DIR),/var/lib/agent-sandbox-sdk-test)
BENCH_DATA_DIR ?= /var/lib/agent-sandbox-bench-smoke
bench-smoke: build
	$(call seed_base,$(SDK_DATA_DIR),$(BENCH_DATA_DIR))
	bin/agent-sandbox bench --quick --wait-host --data-dir $(BENCH_DATA_DIR)

## deps, deps-test: what the server, and the tests, need on a fresh Debian 12 machine
deps:
	./scripts/install-deps.sh

deps-test:
	./scripts/install-deps.sh --test

## generate: gen/ from proto/ (never edit gen/ by hand)
generate:
	$(BUF) generate

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/'))" || { gofmt -l $$(git ls-files '*.go' | grep -v '^gen/'); exit 1; }
	$(GO) vet ./...
	$(STATICCHECK) ./...

## bench-envd: envd round-trip and throughput figures through the SDK
bench-envd: deps-test build
	node test/sdk/bench.mjs

clean:
	rm -rf bin
