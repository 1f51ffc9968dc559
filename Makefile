# podtoip-controller — run `make help` for the list of targets.

SHELL := /bin/bash
.DEFAULT_GOAL := help

GO       ?= go
BIN      := bin/podtoip-controller
# The kubectl plugin: `kubectl ptp ...` once it is on PATH (docs/history.md).
PLUGIN   := bin/kubectl-ptp
TOOLS    := _output/bin
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# Expanded once: a commit made while a target runs must not give its steps
# two versions (the image's label and its binary's --version).
VERSION  := $(VERSION)
LDFLAGS  := -s -w -X main.version=$(VERSION)
# Every build is static (cgo off), as the image and a release need, except
# the race detector's, which needs cgo. The controller, the plugin, the
# end-to-end tests and the control plane then share what they have in common
# (client-go, the API types, their dependencies at the same versions), and
# Go's build cache compiles it once for them all.
export CGO_ENABLED := 0

# Pinned control plane, built from Go modules (see hack/tools/*/go.mod):
# kube-apiserver and etcd for every test; kube-controller-manager,
# kube-scheduler and kwok (the kubelets of fake nodes) for the simulated
# cluster that the demo and the workload tests run on.
KUBE_VERSION := v1.37.2
KUBE_LDFLAGS := -s -w -X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37
APISERVER := $(TOOLS)/kube-apiserver
ETCD      := $(TOOLS)/etcd
KCM       := $(TOOLS)/kube-controller-manager
SCHEDULER := $(TOOLS)/kube-scheduler
KWOK      := $(TOOLS)/kwok
# kwok has no behaviour built in: its Stage objects (what happens to a pod or
# node, and when) come from the same pinned module. The "fast" stages make a
# bound pod Running with addresses at once, finish Job pods and complete
# deletions; the node stages make nodes Ready and renew their leases.
KWOK_STAGES := $(TOOLS)/kwok-stages.yaml
KWOK_STAGE_FILES := pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml \
	node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml
KUBE_MOD := hack/tools/kubernetes/go.mod hack/tools/kubernetes/go.sum
# jq for the end-to-end test that runs the README's queries of the
# controller's JSON log: gojq, a jq in Go, pinned, so the tests depend on
# nothing the machine may lack.
JQ         := $(TOOLS)/jq
JQ_VERSION := v0.12.19

include hack/image/image.mk
include hack/release/release.mk

# E2E_FLAGS lets you pass extra `go test` flags, e.g. E2E_FLAGS='-run Lifecycle -v'.
E2E_FLAGS ?=

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# Static binaries, built as the image and a release build them (no cgo,
# -trimpath): what one compiled, the others find in Go's build cache.
.PHONY: build
build: ## Build bin/podtoip-controller and the kubectl plugin bin/kubectl-ptp.
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) .
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(PLUGIN) ./cmd/kubectl-ptp

.PHONY: controlplane
controlplane: $(APISERVER) $(ETCD) $(KCM) $(SCHEDULER) $(KWOK) $(KWOK_STAGES) $(JQ) ## Build the pinned control plane and simulated cluster used by tests and the demo (once; ~10-15 minutes the first time on 2 cores).

# One go build for the three: the packages they share are compiled once and
# one binary links while the others still compile.
$(APISERVER) $(KCM) $(SCHEDULER) &: $(KUBE_MOD)
	@mkdir -p $(TOOLS)
	@echo ">> building kube-apiserver, kube-controller-manager and kube-scheduler $(KUBE_VERSION) from source into $(TOOLS)/ (first time: ~8-10 minutes on 2 cores; cached afterwards)"
	cd hack/tools/kubernetes && $(GO) build -trimpath -ldflags '$(KUBE_LDFLAGS)' -o $(CURDIR)/$(TOOLS)/ \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler
	@touch $(APISERVER) $(KCM) $(SCHEDULER)
	@$(APISERVER) --version

$(ETCD): hack/tools/etcd/go.mod hack/tools/etcd/go.sum hack/tools/etcd/main.go
	@mkdir -p $(TOOLS)
	@echo ">> building etcd from source into $(TOOLS)/ (first time: ~1 minute)"
	cd hack/tools/etcd && $(GO) build -trimpath -ldflags '-s -w' -o $(CURDIR)/$@ .
	@$@ --version | head -1

$(KWOK): hack/tools/kwok/go.mod hack/tools/kwok/go.sum
	@mkdir -p $(TOOLS)
	@echo ">> building kwok into $(TOOLS)/ (first time: ~1-2 minutes)"
	cd hack/tools/kwok && $(GO) build -trimpath -ldflags '-s -w' -o $(CURDIR)/$@ sigs.k8s.io/kwok/cmd/kwok

$(JQ):
	@mkdir -p $(TOOLS)
	GOBIN=$(CURDIR)/$(TOOLS)/.gojq $(GO) install github.com/itchyny/gojq/cmd/gojq@$(JQ_VERSION)
	mv $(TOOLS)/.gojq/gojq $@ && rmdir $(TOOLS)/.gojq

$(KWOK_STAGES): hack/tools/kwok/go.mod hack/tools/kwok/go.sum
	@mkdir -p $(TOOLS)
	@set -e; dir=$$(cd hack/tools/kwok && $(GO) mod download sigs.k8s.io/kwok && $(GO) list -m -f '{{.Dir}}' sigs.k8s.io/kwok); \
	for f in $(KWOK_STAGE_FILES); do echo '---'; cat "$$dir/kustomize/stage/$$f"; done > $@.tmp; mv $@.tmp $@
	@echo ">> wrote $@ from kwok's stages: $(KWOK_STAGE_FILES)"

.PHONY: test
test: test-unit test-fuzz test-image test-release test-sql test-e2e ## Run all tests: unit tests, a short fuzz run, the image check, the release and Helm chart checks, the SQL of docs/sql against enrich, then the end-to-end and fault suites against a real API server.

# test-sql runs docs/sql/duckdb.sql with DuckDB (cgo: its module brings a
# prebuilt library) on exports of a synthetic history, and compares every
# answer with kubectl ptp enrich's on the same files (hack/sqlcheck).
.PHONY: test-sql
test-sql: ## Check that docs/sql/duckdb.sql answers as kubectl ptp enrich, record by record (DuckDB through cgo; about a minute).
	cd hack/sqlcheck && CGO_ENABLED=1 $(GO) test -count=1 ./...

.PHONY: test-unit
test-unit: ## Run the unit tests (race detector on).
	CGO_ENABLED=1 $(GO) test -race -count=1 ./...

# FUZZTIME is how much test-fuzz runs each fuzz target: a count of inputs
# (Nx) or a duration. The default is a count, so CI does the same work on any
# machine, and because a duration expiring mid-run can make Go's fuzzer report
# "context deadline exceeded" as a failure with no crasher.
FUZZTIME ?= 5000x
# Each fuzz target as package:Target.
FUZZ_TARGETS := .:FuzzDesiredMirror .:FuzzMirrorChanged .:FuzzApplyDesired .:FuzzDecodePodToIp .:FuzzCacheDecoderMatchesStandard \
	.:FuzzEncodeMirrorMatchesStandard ./internal/kubeclient:FuzzScanWrittenMeta ./internal/jsonscan:FuzzCursorMatchesEncodingJSON ./internal/jsonscan:FuzzFramer \
	./internal/addr:FuzzCanonical ./internal/slim:FuzzUID ./internal/conflicts:FuzzHolderIndex ./internal/history:FuzzNameRoundTrip ./internal/history:FuzzOperations ./internal/history:FuzzPatch \
	./internal/enrich:FuzzAWS ./internal/enrich:FuzzGCP ./internal/enrich:FuzzJSONL ./internal/enrich:FuzzCSV ./internal/enrich:FuzzDecodeItemMatchesStandard

.PHONY: test-fuzz
test-fuzz: ## Run each fuzz target for FUZZTIME (5000 inputs); a crasher is written to testdata/fuzz/ and fails the run (keep it as a regression seed).
	GO=$(GO) hack/fuzz.sh $(FUZZTIME) $(FUZZ_TARGETS)

# Mutation testing of the pure logic, kept out of `make test` because it
# rebuilds and reruns a package's tests once per mutant (minutes of both
# cores). The tool is pinned; `go run pkg@version` builds it once into Go's
# cache. Each package in MUTATE_PKGS is mutated on its own; in the root
# package, only MUTATE_ROOT_FILES (the desired state, the cache records and
# the decoders, the conflict lookups), since the rest is wiring the
# end-to-end suite covers.
# Survivors that no test can kill are listed in docs/mutation.md with the
# reason. The timeout is 20 times the coverage run: each mutant recompiles
# the package, and on a loaded machine a lower factor times out mutants the
# tests kill.
GREMLINS          := $(GO) run github.com/go-gremlins/gremlins/cmd/gremlins@v0.6.0
MUTATE_PKGS       ?= ./internal/addr ./internal/slim ./internal/tracker ./internal/conflicts ./internal/jsonscan ./internal/trail ./internal/history ./internal/podinfo .
MUTATE_ROOT_FILES ?= mirror.go records.go codec.go sync.go
# GREMLINS_FLAGS adds flags, e.g. --dry-run to list the mutants without testing them.
GREMLINS_FLAGS    ?=
MUTATE_ROOT_SKIP  := $(filter-out $(MUTATE_ROOT_FILES) %_test.go,$(wildcard *.go))

.PHONY: test-mutation
test-mutation: ## Mutation-test the packages with pure logic with gremlins v0.6.0 (CPU-heavy; not part of `make test`; MUTATE_PKGS=... to narrow).
	@set -e; for p in $(MUTATE_PKGS); do \
		echo ">> $$p"; \
		if [ "$$p" = . ]; then skip="-E / $(foreach f,$(MUTATE_ROOT_SKIP),-E '^$(subst .,\.,$(f))$$')"; else skip=""; fi; \
		eval $(GREMLINS) unleash $(GREMLINS_FLAGS) --workers 1 --timeout-coefficient 20 --invert-logical --invert-loopctrl $$skip $$p; \
	done

.PHONY: test-e2e
test-e2e: build controlplane ## Run the end-to-end suite: real kube-apiserver + etcd, the real binary, kubectl (three processes at once, see hack/e2e.sh; with E2E_FLAGS, one `go test`).
ifeq ($(strip $(E2E_FLAGS)),)
	GO=$(GO) hack/e2e.sh
else
	cd e2e && $(GO) test -count=1 -timeout 20m $(E2E_FLAGS) ./...
endif

# TRUTH_SEEDS is how many seeds `make test-truth` runs, one after another;
# TRUTH_SEED=N fixes the first (the others stay random); TRUTH_ROUNDS=N
# runs each of the five faults N times a seed (once by default).
TRUTH_SEEDS ?= 20
TRUTH_TIMEOUT ?= 6h

.PHONY: test-truth
test-truth: build controlplane ## Run the randomized truth test of the history in full: TRUTH_SEEDS seeds (20), each >= 300 pod lifecycles under failovers, restarts, the history off and lost write responses, then 2,000 who-had queries judged against the pods (see docs/history.md).
	cd e2e && TRUTH_FULL=1 TRUTH_SEEDS=$(TRUTH_SEEDS) $(if $(TRUTH_SEED),TRUTH_SEED=$(TRUTH_SEED)) $(if $(TRUTH_ROUNDS),TRUTH_ROUNDS=$(TRUTH_ROUNDS)) \
		$(GO) test -count=1 -timeout $(TRUTH_TIMEOUT) -run '^TestHistoryTruth$$' -v .

# N is the number of pods `make bench` creates (N=50000 works too, in ~10 minutes).
N ?= 10000
# BENCH_FLAGS passes flags to the benchmark, e.g. BENCH_FLAGS=-strict to exit
# 3 when a target is missed (by default it exits 0 and lists the misses last).
BENCH_FLAGS ?=

# The benchmark is built, then run, rather than `go run`: go run would turn
# its exit code into 1 and print "exit status N" after its verdict.
# To compare with the plain controller-runtime baseline (bench-crmirror),
# run the controller without its history too:
#   make bench BENCH_FLAGS=-controller-args=--history-retention=0
.PHONY: bench
bench: build controlplane ## Benchmark the controller with its default flags on a throwaway control plane (N=10000 pods); writes _output/bench/bench-N.json and ends with the targets missed.
	cd e2e && $(GO) build -o $(CURDIR)/bin/bench ./cmd/bench
	cd e2e && $(CURDIR)/bin/bench -n $(N) -controller $(CURDIR)/$(BIN) $(BENCH_FLAGS)

# bench-rounds compares two setups in alternating rounds of the benchmark,
# A then B each round: A_CONTROLLER and B_CONTROLLER (default: this build),
# A_FLAGS and B_FLAGS (bench flags, e.g. -controller-args=--history-retention=0).
ROUNDS       ?= 3
A_CONTROLLER ?= $(CURDIR)/$(BIN)
B_CONTROLLER ?= $(CURDIR)/$(BIN)
A_FLAGS      ?=
B_FLAGS      ?=
.PHONY: bench-rounds
bench-rounds: build controlplane ## Run the benchmark ROUNDS times (3) for setups A and B alternately (N pods) and print each round's figures and the medians of B/A; writes _output/bench/rounds/.
	cd e2e && $(GO) build -o $(CURDIR)/bin/bench ./cmd/bench
	hack/bench-rounds.sh $(CURDIR)/bin/bench $(CURDIR)/$(JQ) $(CURDIR)/_output/bench/rounds $(ROUNDS) $(N) "$(A_CONTROLLER)" "$(A_FLAGS)" "$(B_CONTROLLER)" "$(B_FLAGS)"

.PHONY: crmirror
crmirror: ## Build bin/crmirror, a plain controller-runtime PodToIp mirror without conflicts or history (e2e/cmd/crmirror), the baseline of bench-crmirror.
	cd e2e && $(GO) build -trimpath -ldflags '-s -w' -o $(CURDIR)/bin/crmirror ./cmd/crmirror

.PHONY: bench-crmirror
bench-crmirror: crmirror controlplane ## Benchmark bin/crmirror as bench does the controller (no history; N pods); writes _output/bench/crmirror-N.json.
	cd e2e && $(GO) build -o $(CURDIR)/bin/bench ./cmd/bench
	cd e2e && $(CURDIR)/bin/bench -n $(N) -controller $(CURDIR)/bin/crmirror -history=false -out $(CURDIR)/_output/bench/crmirror-$(N).json $(BENCH_FLAGS)

# ENRICH_RECORDS and ENRICH_ADDRESSES size bench-enrich.
ENRICH_RECORDS ?= 1000000
ENRICH_ADDRESSES ?= 10000

.PHONY: bench-enrich
bench-enrich: build ## Time kubectl ptp enrich over ENRICH_RECORDS aws-vpc records (1,000,000) and a history of ENRICH_ADDRESSES addresses (10,000) against awk over the same file, and its memory per address (docs/history.md).
	hack/enrichbench/bench.sh $(CURDIR)/$(PLUGIN) $(CURDIR)/bin/enrichbench $(ENRICH_RECORDS) $(ENRICH_ADDRESSES)

.PHONY: bench-plots
bench-plots: ## Draw docs/img/*.png from the results recorded in docs/bench/.
	cd hack/benchplot && $(GO) run . -in $(CURDIR)/docs/bench -out $(CURDIR)/docs/img

.PHONY: test-faults
test-faults: build controlplane ## Run only the fault scenarios (part of test-e2e; about 4 minutes).
	cd e2e && $(GO) test -count=1 -timeout 20m -run '^TestFault' -v ./...

.PHONY: demo demo-notice
# The demo is built and run as a binary, not with `go run`, so that a signal
# reaches the demo itself rather than a wrapper that would die first.
demo: demo-notice build controlplane ## Start a throwaway simulated cluster (kwok nodes) with the controller and a first workload; Ctrl-C to stop and clean up.
	cd e2e && $(GO) build -o $(CURDIR)/bin/demo ./cmd/demo
	cd e2e && exec $(CURDIR)/bin/demo

# Said first, before any build starts, so nobody takes the wait for a hang.
demo-notice:
	@if [ ! -x $(KCM) ] || [ ! -x $(APISERVER) ] || [ ! -x $(KWOK) ]; then \
		echo ">> make demo: the first run builds kube-apiserver, kube-controller-manager, kube-scheduler, etcd and kwok from source:"; \
		echo ">> about 10-15 minutes on 2 cores, once; later runs start in seconds."; fi

.PHONY: vet
vet: ## Run go vet and gofmt checks on all modules.
	$(GO) vet ./...
	cd e2e && $(GO) vet ./...
	cd hack/image && $(GO) vet ./...
	cd hack/benchplot && $(GO) vet ./...
	cd hack/release && $(GO) vet ./...
	cd hack/sqlcheck && CGO_ENABLED=1 $(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo 'gofmt needed'; exit 1; }

.PHONY: clean
clean: ## Remove built binaries (keeps the control-plane build; see clean-all).
	rm -rf bin

.PHONY: clean-all
clean-all: clean ## Also remove the control-plane binaries.
	rm -rf _output
