# agent-sandbox build and test entry points. `make test` is the whole suite;
# .ci/run calls it on a fresh clone.
GO       ?= go
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X github.com/agent-sandbox/agent-sandbox/internal/cli.version=$(VERSION)
BUF      := $(GO) run github.com/bufbuild/buf/cmd/buf@v1.75.0
STATICCHECK := $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: build serve test test-go test-sdk deps deps-test generate lint bench-envd clean

## build: bin/agent-sandbox and bin/envd, both static
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/ ./cmd/...

## serve: the server on its embedded defaults (needs root); the first start
## builds the base template, with progress
serve: deps build
	bin/agent-sandbox serve

## test: everything — Go unit and root tests, then the official-SDK suite
test: deps-test build test-go test-sdk

test-go:
	$(GO) test -race -count=1 ./...

test-sdk: deps-test build
	node test/sdk/run.mjs

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
