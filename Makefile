# Quorate's build. Everything a fresh machine needs is installed from here.
SHELL := /bin/bash
GO ?= go
BIN := bin/quorate
BENCH_BIN := bin/quorate-bench
PROTO_FILES := $(shell find proto -name '*.proto' | sort)
# Generated Go is committed; `make proto` regenerates it, `make verify` checks it is current.
PROTO_GEN_DIR := .cache/proto-gen

# release: static binaries for each platform, stamped, with SHA256SUMS (see below).
.PHONY: all build build-bench release image run test race proto proto-deps browser-deps status-page-screenshot verify bench bench-deps bench-compare jepsen clean

all: build

## build: bin/quorate, stamped with its version (git describe), commit and build
## date, which `quorate version`, /metrics (quorate_build_info) and every node's
## start-up log show; `make build VERSION=v1.2.3` names another version.
VERSION = $(shell git describe --tags --always --dirty 2>/dev/null)
COMMIT = $(shell git rev-parse HEAD 2>/dev/null)
BUILD_DATE = $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
STAMP := github.com/quorate/quorate/node
LDFLAGS = -X $(STAMP).stampVersion=$(VERSION) -X $(STAMP).stampCommit=$(COMMIT) -X $(STAMP).stampBuildDate=$(BUILD_DATE)

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/quorate

## release: static quorate binaries (CGO_ENABLED=0, -trimpath) for each of
## RELEASE_PLATFORMS, stamped as `make build` stamps, in
## $(DIST)/<version>/quorate-<version>-<os>-<arch>, with SHA256SUMS beside them
## (`sha256sum -c SHA256SUMS` checks a download). `make release VERSION=v0.1.0`
## names the version; CHANGELOG.md says what each one holds.
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64 darwin/arm64
DIST ?= dist
release:
	@set -e; v='$(VERSION)'; out='$(DIST)'/"$$v"; rm -rf "$$out"; mkdir -p "$$out"; \
	for p in $(RELEASE_PLATFORMS); do os=$${p%/*}; arch=$${p#*/}; f="quorate-$$v-$$os-$$arch"; \
		echo "building $$out/$$f"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS) -s -w' -o "$$out/$$f" ./cmd/quorate; \
	done; \
	cd "$$out" && sha256sum quorate-* > SHA256SUMS && echo "wrote $$out/SHA256SUMS"

## image: Quorate's OCI image for each of IMAGE_PLATFORMS, built without a
## network or a container engine by deploy/image (from scratch: the static
## binary, built as `make release` builds it, the CA bundle CA_CERTS, the
## user quorate 65532:65532, the volume /var/lib/quorate): $(DIST)/image/<version>/oci,
## an OCI image layout of one index of them all, and quorate-<version>-<os>-<arch>.tar,
## a `docker load` archive of each. The build date stamped and every timestamp in
## the image is the commit's time, so a commit gives the same digest every time.
IMAGE_PLATFORMS ?= linux/amd64 linux/arm64
CA_CERTS ?= /etc/ssl/certs/ca-certificates.crt
image: BUILD_DATE = $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null)
image:
	@set -e; v='$(VERSION)'; out='$(abspath $(DIST))'/image/"$$v"; bins=; \
	[ -f '$(CA_CERTS)' ] || { echo "make image: no CA bundle at $(CA_CERTS) (Debian's ca-certificates package installs it; CA_CERTS=FILE names another)"; exit 1; }; \
	for p in $(IMAGE_PLATFORMS); do os=$${p%/*}; arch=$${p#*/}; b="$(CURDIR)/.cache/image/$$os-$$arch/quorate"; \
		echo "building $$b"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS) -s -w' -o "$$b" ./cmd/quorate; \
		bins="$$bins --binary $$p=$$b"; \
	done; \
	cd deploy/image && $(GO) run . --version "$$v" --revision '$(COMMIT)' --created '$(BUILD_DATE)' \
		--ca-certs '$(abspath $(CA_CERTS))' $$bins --out "$$out"

## build-bench: bin/quorate-bench, the load generator (quorate-bench, and
## quorate-bench compare with its Redis and Gubernator drivers): a binary of
## its own, so that bin/quorate links neither client.
build-bench:
	$(GO) build -o $(BENCH_BIN) ./cmd/quorate-bench

## run: start a local 3-node cluster, state in ./data/dev: API on 127.0.0.1
## ports PORT to PORT+2 (default 7070-7072), Raft on PORT+100 to PORT+102.
PORT ?= 7070
run: build
	./$(BIN) dev --dir data/dev --api-port $(PORT) --raft-port $$(( $(PORT) + 100 ))

## test: all tests of every module, with the race detector. The fault-injection
## runs (jepsen) start real processes: they run after the other packages, not
## beside them, so that the in-process clusters of the node tests do not
## starve for CPU. What the tests need is installed when it can be (Debian's
## apt-get, as root or with sudo): a C compiler for -race (without one the
## tests run without it), Chromium for the status page's browser test
## (without one that test is skipped, saying so), promtool, from Debian's
## prometheus package, for the metrics checks (without it they use promlint
## alone, saying so) and deploy/'s alerts and dashboard (skipped without it),
## and systemd-analyze, from Debian's systemd, for deploy/'s unit (skipped
## without it). About 18 minutes on 2 cores.
test: browser-deps
	@if ! $(HAVE_CC); then $(call apt_install,gcc,the race detector needs a C compiler for cgo); fi
	@if ! command -v promtool >/dev/null; then $(call apt_install,prometheus,promtool checks the metrics pages; without it promlint alone does); fi
	@if ! command -v systemd-analyze >/dev/null; then $(call apt_install,systemd,systemd-analyze verifies deploy/systemd/quorate.service; without it that test is skipped); fi
	@race=-race; if ! $(HAVE_CC); then \
		echo "make test: no C compiler for cgo ($$($(GO) env CC)): running the tests WITHOUT the race detector"; race=; fi; \
	$(GO) test $$race -count=1 -timeout 30m $$($(GO) list ./... | grep -v /jepsen$$) && \
	for m in $(MODULES); do (cd $$m && $(GO) test $$race -count=1 -timeout 30m ./...) || exit 1; done && \
	$(GO) test $$race -count=1 -timeout 30m ./jepsen/...

# MODULES are the Go modules in this repository besides the main one: the Go
# client (go.mod replaces it and the API with their directories), which a service imports
# without the server's dependencies, and the generated API; the test of the
# Kubernetes manifests, which needs the Kubernetes API's types the server does
# not; and the builder of the container image (go-containerregistry). The main
# module requires neither of the last two. `./...` in the main module stops at
# their go.mod, so test and verify visit each.
MODULES := client proto deploy/kubernetes deploy/image

# HAVE_CC succeeds where cgo, which -race needs, has a C compiler.
HAVE_CC = { [ "$$($(GO) env CGO_ENABLED)" = 1 ] && command -v "$$($(GO) env CC)" >/dev/null; }

# apt_install installs Debian's package $(1), which $(2) says the need of,
# where it can (apt-get, and root or sudo without a password); where it
# cannot, it says what is missing and carries on.
define apt_install
	if ! command -v apt-get >/dev/null; then \
		echo "make: $(1) is missing and there is no apt-get to install it ($(2))"; \
	elif [ "$$(id -u)" = 0 ]; then \
		echo "installing $(1)"; \
		{ apt-get update -qq && apt-get install -y -qq --no-install-recommends $(1) >/dev/null; } || echo "make: installing $(1) failed ($(2))"; \
	elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then \
		echo "installing $(1)"; \
		{ sudo apt-get update -qq && sudo apt-get install -y -qq --no-install-recommends $(1) >/dev/null; } || echo "make: installing $(1) failed ($(2))"; \
	else \
		echo "make: $(1) is missing and installing it needs root or sudo without a password ($(2))"; \
	fi
endef

# protoc comes from Debian's protobuf-compiler (with libprotobuf-dev for the
# well-known types); the Go plugins are pinned tools in go.mod (`go tool`).
proto-deps:
	@if ! command -v protoc >/dev/null || [ ! -f /usr/include/google/protobuf/duration.proto ]; then \
		echo "installing protobuf-compiler and libprotobuf-dev"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends protobuf-compiler libprotobuf-dev >/dev/null; \
	fi

# The status page's browser test (statuspage) drives Debian's chromium
# headless; without a Chromium it is skipped, saying so.
browser-deps:
	@if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null && ! command -v google-chrome >/dev/null; then \
		$(call apt_install,chromium,the status page's browser test is skipped without it); \
	fi

## status-page-screenshot: load the status page of a 3-node test cluster in
## headless Chromium and write its screenshot to docs/status-page.png.
status-page-screenshot: browser-deps
	QUORATE_STATUS_SCREENSHOT=1 $(GO) test -race -count=1 -run '^TestStatusPageInBrowser$$' ./statuspage/

proto: proto-deps
	$(call gen_proto,proto)

define gen_proto
	@mkdir -p $(1)
	@$(GO) build -o .cache/bin/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
	@$(GO) build -o .cache/bin/protoc-gen-connect-go connectrpc.com/connect/cmd/protoc-gen-connect-go
	protoc -I proto -I /usr/include \
		--plugin=protoc-gen-go=.cache/bin/protoc-gen-go \
		--plugin=protoc-gen-connect-go=.cache/bin/protoc-gen-connect-go \
		--go_out=$(1) --go_opt=paths=source_relative \
		--connect-go_out=$(1) --connect-go_opt=paths=source_relative \
		$(PROTO_FILES)
endef

## verify: formatting, vet and tidy go.mod (of every module), current generated code
verify: proto-deps
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) mod tidy -diff
	@# The planted bugs of make jepsen are behind build tags: the node's local
	@# read, the FSM's dedupe bug, the client's overspend; each must compile.
	$(GO) vet -tags quorate_planted_local_read ./node/...
	$(GO) vet -tags quorate_planted_bug ./fsm/...
	cd client && $(GO) vet -tags quorate_planted_overspend ./...
	@for m in $(MODULES); do echo "$$m: go vet ./... && go mod tidy -diff"; \
		(cd $$m && $(GO) vet ./... && $(GO) mod tidy -diff) || exit 1; done
	@rm -rf $(PROTO_GEN_DIR)
	$(call gen_proto,$(PROTO_GEN_DIR))
	@stale=0; for f in $$(cd $(PROTO_GEN_DIR) && find . -name '*.go' | sed 's|^\./||' | sort); do \
		if ! cmp -s $(PROTO_GEN_DIR)/$$f proto/$$f; then echo "stale generated file: proto/$$f (run make proto)"; stale=1; fi; done; \
	for f in $$(cd proto && find . -name '*.go' ! -name doc.go | sed 's|^\./||' | sort); do \
		[ -f $(PROTO_GEN_DIR)/$$f ] || { echo "generated file with no .proto source: proto/$$f"; stale=1; }; done; \
	exit $$stale

## bench: benchmarks (admission algorithms, FSM apply, a 3-node cluster)
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
	for m in $(MODULES); do (cd $$m && $(GO) test -run '^$$' -bench . -benchmem ./...) || exit 1; done

# Gubernator for bench-compare: its release binary, built from the pinned
# module version into .cache/bin (not a dependency of Quorate's go.mod).
GUBERNATOR_VERSION := v2.13.0
GUBERNATOR := .cache/bin/gubernator

$(GUBERNATOR):
	@echo "installing gubernator $(GUBERNATOR_VERSION) into .cache/bin"
	GOBIN=$(CURDIR)/.cache/bin $(GO) install github.com/gubernator-io/gubernator/v2/cmd/gubernator@$(GUBERNATOR_VERSION)

## bench-deps: what bench-compare runs besides Quorate: redis-server (Debian's)
## and gubernator (.cache/bin), each installed when absent.
bench-deps: $(GUBERNATOR)
	@if ! command -v redis-server >/dev/null; then \
		echo "installing redis-server"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends redis-server >/dev/null; \
	fi

## bench-compare: Quorate (3-node dev cluster) against Redis running the same
## token-bucket Lua script (plain, then appendfsync always) and a 3-node
## Gubernator cluster, one after the other with the same load generator; prints
## the table and writes it, with the machine, into docs/BENCHMARKS.md
## (bin/quorate-bench runs the load, bin/quorate dev the cluster). Installs
## redis-server and gubernator when absent.
bench-compare: build build-bench bench-deps
	@mkdir -p docs
	./$(BENCH_BIN) compare --quorate-binary $(BIN) --gubernator $(GUBERNATOR) --write docs/BENCHMARKS.md

## jepsen: the full fault-injection matrix against real processes — each fault
## family, then all mixed, 60 s each, every workload at once — then the
## planted-bug self-tests (the server's three, the Go clients' one), which must fail. Reports in data/jepsen/.
jepsen: build
	rm -rf data/jepsen
	$(GO) run ./cmd/quorate-jepsen --binary $(BIN) --matrix full --duration 60s --report data/jepsen/matrix
	@for run in dedupe:token-bucket,fixed-window local-read:token-bucket,fixed-window overspend:grant; do \
		bug=$${run%%:*}; \
		$(GO) run ./cmd/quorate-jepsen --planted-bug $$bug --workload $${run#*:} --faults kill,pause \
			--duration 15s --report data/jepsen/planted-$$bug > data/jepsen/planted-$$bug.txt 2>&1; \
		if grep -q '^FAIL ' data/jepsen/planted-$$bug.txt; then \
			echo "jepsen: the planted $$bug bug was caught by: $$(grep '^FAIL ' data/jepsen/planted-$$bug.txt | cut -d: -f1 | cut -c6- | tr '\n' ' ')"; \
		else echo "jepsen: the planted $$bug bug was NOT caught (data/jepsen/planted-$$bug.txt)"; exit 1; fi; \
	done
	@# The Go clients' overspend lives in the harness's own clients: the harness is built with it.
	@$(GO) run -tags quorate_planted_overspend ./cmd/quorate-jepsen --binary $(BIN) --workload grant,grant-bucket --faults kill,pause \
		--duration 15s --report data/jepsen/planted-client-overspend > data/jepsen/planted-client-overspend.txt 2>&1; \
	if grep -q '^FAIL ' data/jepsen/planted-client-overspend.txt; then \
		echo "jepsen: the planted client-overspend bug was caught by: $$(grep '^FAIL ' data/jepsen/planted-client-overspend.txt | cut -d: -f1 | cut -c6- | tr '\n' ' ')"; \
	else echo "jepsen: the planted client-overspend bug was NOT caught (data/jepsen/planted-client-overspend.txt)"; exit 1; fi

clean:
	rm -rf $(DIST)
	rm -rf bin .cache
