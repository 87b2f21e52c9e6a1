# Chamber's make targets are its interface: make tools, make test, make demo, make lint.
SHELL := /bin/bash
BIN := $(CURDIR)/bin
GO ?= go

# go-nvml's header marks functions of older drivers deprecated, and cgo warns on each
# (about 150 lines every cold build): silenced, for every build make runs.
export CGO_CFLAGS ?= -O2 -g
CGO_CFLAGS += -Wno-deprecated-declarations

# Version stamped into the control-plane binaries. Kueue refuses an API server that
# reports v0.0.0-master, so the build must say which release it is.
KUBE_VERSION := v1.36.3
KUBE_VERSION_PKGS := k8s.io/component-base/version k8s.io/client-go/pkg/version
kube_minor = $(word 2,$(subst ., ,$(1)))
kube_ldflags = $(foreach p,$(KUBE_VERSION_PKGS),-X $(p).gitVersion=$(1) -X $(p).gitMajor=1 -X $(p).gitMinor=$(call kube_minor,$(1)) -X $(p).gitTreeState=clean -X $(p).buildDate=2026-01-01T00:00:00Z)
KUBE_LDFLAGS := $(call kube_ldflags,$(KUBE_VERSION))

# The oldest and the newest Kubernetes Chamber supports, on which test/versions runs
# its smoke suite; every other test runs on KUBE_VERSION. Each is built from
# tools/kubernetes-1.MINOR into bin/kubernetes-VERSION/.
KUBE_OLDEST := v1.34.4
KUBE_NEWEST := v1.37.2
kube_smoke_bins = $(foreach b,kube-apiserver kube-controller-manager kube-scheduler,$(BIN)/kubernetes-$(1)/$(b))

# Kueue's previous minor, with which test/versions/kueueprevious runs the smoke suite
# (every other test runs the Kueue of go.mod): upstream's, unpatched, built from
# tools/kueue-0.MINOR into bin/kueue-VERSION/ with its manifests as bin/kueue-manifests.
KUEUE_PREVIOUS := v0.18.3
KUEUE_PREVIOUS_MOD := tools/kueue-0.$(call kube_minor,$(KUEUE_PREVIOUS))
KUEUE_PREVIOUS_DIR := $(BIN)/kueue-$(KUEUE_PREVIOUS)

KUBE_BINS := $(BIN)/kube-apiserver $(BIN)/kube-controller-manager $(BIN)/kube-scheduler $(BIN)/kubectl
# What the simulator (make demo) runs: the control plane, kwok and Kueue.
SIM_TOOLS := $(KUBE_BINS) $(BIN)/etcd $(BIN)/kwok $(BIN)/kwok-stages.yaml $(BIN)/kueue $(BIN)/kueue-manifests/webhooks.yaml
TOOLS := $(SIM_TOOLS) $(BIN)/kubelet $(call kube_smoke_bins,$(KUBE_OLDEST)) $(call kube_smoke_bins,$(KUBE_NEWEST)) \
	$(KUEUE_PREVIOUS_DIR)/kueue $(KUEUE_PREVIOUS_DIR)/kueue-manifests/webhooks.yaml \
	$(BIN)/controller-gen $(BIN)/helm \
	$(BIN)/prometheus $(BIN)/promtool $(BIN)/staticcheck \
	$(BIN)/vc-scheduler $(BIN)/vc-controller-manager $(BIN)/volcano-crds/scheduling.volcano.sh_queues.yaml

# go test's own limit; the integration suites start real control planes. -count=1: a
# cached pass says nothing about the control-plane binaries, which go test does not track.
TEST_TIMEOUT ?= 30m

.PHONY: all
all: build

.PHONY: build
build: ## Compile every package.
	$(GO) build ./...

# Where the suite records each kind of request the chart's ServiceAccounts made
# (test/controlplane.RBACUseDir); test/rbac then fails on any verb the chart grants
# that no test used.
RBAC_USE = $(BIN)/rbac-use

.PHONY: test
test: tools ## Unit and integration tests under the race detector (builds the tools first when missing, and the image, which test/realnode runs), the image's, the chart's granted verbs against those the suite used, then each fuzz target for 20,000 inputs.
	@$(MAKE) --no-print-directory image
	rm -rf $(RBAC_USE) && mkdir -p $(RBAC_USE)
	CHAMBER_RBAC_USE=$(RBAC_USE) $(GO) test -count=1 -race -timeout $(TEST_TIMEOUT) ./...
	cd tools/image && $(GO) test -count=1 -race -timeout $(TEST_TIMEOUT) ./...
	CHAMBER_RBAC_CHECK=$(RBAC_USE) $(GO) test -count=1 -run TestGrantedVerbsAreUsed -v ./test/rbac/
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(TEST_FUZZTIME)

# How many inputs make test fuzzes each target with: a count, not a duration, since a
# duration races go test's own deadline on a loaded machine and fails with "context
# deadline exceeded" though no input failed (make fuzz: FUZZTIME, longer).
TEST_FUZZTIME ?= 20000x

# The image the chart runs, built without a container engine (tools/image: go-
# containerregistry, this Debian machine's glibc): an OCI layout and a tarball in
# bin/image; IMAGE_PUSH=true pushes it to IMAGE's registry with docker's credentials.
IMAGE ?= ghcr.io/chamber-dev/chamber:$(shell awk '/^appVersion:/ { gsub(/"/, "", $$2); print $$2 }' charts/chamber/Chart.yaml)
IMAGE_PUSH ?= false
.PHONY: image
image: ## The container image (both binaries, non-root) as an OCI layout and a tarball in bin/image, without Docker.
	cd tools/image && $(GO) run . --root $(CURDIR) --out $(BIN)/image --tag $(IMAGE) --push=$(IMAGE_PUSH)

.PHONY: bench
bench: bench-go bench-controllers bench-sim ## The Go benchmarks, the controllers' benchmarks, then the simulator's full comparison.

.PHONY: bench-go
bench-go: ## Go benchmarks: NVML poll, agent scrape, fleet model, exporter scrape.
	$(GO) test -run '^$$' -bench . -benchmem ./healthcheck/... ./agent/... ./fleet/... ./exporter/...

# Kueue's scheduler-performance shape with and without Chamber's admission check
# (CHAMBER_PERF_SCALE=1 is its 15,000 workloads; 0.2 takes about 10 minutes here),
# then fault isolation's figures on 100 kwok nodes.
CHAMBER_PERF_SCALE ?= 0.2
.PHONY: bench-controllers
bench-controllers: tools ## Admission check overhead on Kueue's own benchmark shape; fault-to-taint and fault-to-readmission times.
	CHAMBER_PERF_SCALE=$(CHAMBER_PERF_SCALE) $(GO) test -count=1 -timeout 60m -run '^$$' -bench SchedulerShape -benchtime 1x -v ./test/schedulershape/
	$(GO) test -count=1 -timeout 30m -run '^$$' -bench FaultIsolation -benchtime 1x ./controllers/isolation/

# Performance gates (test/perf): the admission check's cost (Kueue's shape twice at
# once on one Kueue, with and without the check: time to admission and API writes per
# workload, check over plain) and fault-to-taint p99 over an echo's (a reconciler that
# only taints, timed beside each fault), each a ratio within one run, against
# test/perf/baseline.json, which also holds the sizes the benchmarks run at: a figure
# more than 20% above its baseline fails. About 6 minutes here; CI runs it after make
# test. make perf-baseline rewrites the baseline as the highest of PERF_RUNS runs.
PERF_RUNS ?= 3
.PHONY: perf-check
perf-check: tools ## Fail when the admission check's ratio or fault-to-taint p99 ratio regressed past test/perf/baseline.json by more than its margin.
	$(GO) run ./test/perf/perfcheck

.PHONY: perf-baseline
perf-baseline: tools ## Rewrite test/perf/baseline.json from PERF_RUNS runs of the gated benchmarks (each figure's highest).
	$(GO) run ./test/perf/perfcheck -update -runs $(PERF_RUNS)

# Chamber at fleet scale: the chamber-controller binary, every controller on, 1,000 kwok
# nodes x 8 GPUs heartbeating, 30 teams, 10,000 workloads, a fault every 15 s; the table
# over time and the figures in chamber-report-scale/report.md. About 35 minutes here
# (the 10,000 workloads are created at 6.7 a second); CHAMBER_SCALE_NODES, _WORKLOADS,
# _RATE, _FAULTS and _CHECK change the run. It runs as the chart's ServiceAccount.
.PHONY: bench-scale
bench-scale: tools ## Chamber at 1,000 GPU nodes and 10,000 workloads: admission, reconcile times, memory, CPU, scrape, fault to taint.
	$(GO) test -count=1 -timeout 90m -run '^$$' -bench Scale -benchtime 1x -v ./test/scale/

# Kueue alone (the strong baseline: the pods' grace the same as Chamber's team grace)
# against Kueue + Chamber on three slices of the week (the demo's and two others,
# chosen before any result was seen) with three seeds each, on the demo's 32 GPUs,
# faults at the published fleets' rate: summary.md (paired ratios with their 95%
# intervals, the goals) and each run's report in chamber-report-bench/; about 45
# minutes. SIM_FLAGS=--baseline-grace=30s runs the weak baseline (Kubernetes' default
# grace).
SIM_STARTS ?= 24h,54h,102h
SIM_SEEDS ?= 1,2,3
SIM_FAULT_RATE ?= 0.12
SIM_FLAGS ?=
.PHONY: bench-sim
bench-sim: tools ## The simulator's sweep: Kueue alone against Kueue + Chamber over 3 slices x 3 seeds on 32 GPUs, faults at the published rate.
	$(GO) run ./cmd/chamber demo --policies kueue,chamber --starts $(SIM_STARTS) --seeds $(SIM_SEEDS) --fault-rate $(SIM_FAULT_RATE) --out chamber-report-bench $(SIM_FLAGS)

# The same sweep with faults at the demo's stress rate, 250 times the published one:
# what fault isolation does when faults are frequent, reported apart from the headline.
.PHONY: bench-sim-stress
bench-sim-stress: tools ## The simulator's sweep with faults at a stress rate (30 per 1000 GPU-hours).
	$(GO) run ./cmd/chamber demo --policies kueue,chamber --starts $(SIM_STARTS) --seeds $(SIM_SEEDS) --fault-rate 30 --out chamber-report-bench-stress $(SIM_FLAGS)

# Kueue alone against Kueue + Chamber on 128 GPUs, on two slices the 32-GPU sweep does
# not use (hours 78 and 126 of the week, chosen before any result was seen), seed 1,
# faults at the published rate; about 50 minutes.
SIM_LARGE_STARTS ?= 78h,126h
.PHONY: bench-sim-large
bench-sim-large: tools ## The simulator's headline at 128 GPUs: Kueue alone against Kueue + Chamber on two slices the sweep does not use.
	$(GO) run ./cmd/chamber sim --policies kueue,chamber --starts $(SIM_LARGE_STARTS) --seeds 1 --out chamber-report-bench-large $(SIM_FLAGS)

# Each fuzz target for FUZZTIME (their seed corpora also run in make test).
FUZZTIME ?= 15s
FUZZ_TARGETS = ./sim:FuzzReadTrace ./integrations/kube:FuzzParsePriorityTiers ./integrations/kueue:FuzzWithheldQuota \
	./healthcheck:FuzzConfigWithFile ./controllers/isolation:FuzzReadRecord ./integrations/kueue:FuzzRequestedEviction \
	./fleet/prices:FuzzParse

.PHONY: fuzz
fuzz: tools ## Run each fuzz target for FUZZTIME (default 15s): the trace reader, the tiers flag, the quota rule, the health rules file, isolation's and the eviction's annotations, the price table.
	@set -e; for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; fn=$${t##*:}; \
	echo "fuzz $$pkg $$fn"; $(GO) test $$pkg -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME); done

.PHONY: lint
lint: $(BIN)/staticcheck $(BIN)/helm ## gofmt, go vet and staticcheck.
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
		if [ -n "$$unformatted" ]; then echo "gofmt needed on:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(BIN)/staticcheck ./...
	$(BIN)/helm lint charts/chamber --kube-version 1.36.3

.PHONY: generate
generate: $(BIN)/controller-gen ## Deepcopy code and CRDs (charts/chamber/files/crds) from api/; dashboards/ into the chart.
	$(BIN)/controller-gen object paths=./api/...
	$(BIN)/controller-gen crd paths=./api/... output:crd:dir=charts/chamber/files/crds
	CHAMBER_UPDATE_REFERENCE=1 $(GO) test ./api/v1alpha1 -run TestCRDReference -count=1
	rm -rf charts/chamber/files/grafana && mkdir -p charts/chamber/files/grafana
	cp dashboards/prometheus-rules.yaml charts/chamber/files/
	cp dashboards/grafana/*.json charts/chamber/files/grafana/

.PHONY: demo
demo: $(SIM_TOOLS) ## The simulator's short scenario (about 4 minutes; builds only the tools it runs first); prints where its report is.
	$(GO) run ./cmd/chamber demo $(SIM_FLAGS)

.PHONY: clean
clean: ## Remove the built tools.
	rm -rf $(BIN)

.PHONY: tools
tools: $(TOOLS) chromium container-runtime ## Build every pinned tool into bin/ (incremental), and install Debian's chromium, containerd, runc and CNI plugins where they are missing.
	@echo "tools: all up to date in $(BIN)"

# Debian's containerd, runc and CNI plugins, on which test/realnode runs Chamber's
# image and a real kubelet; apt-get installs them (as root) where they are missing.
.PHONY: container-runtime
container-runtime:
	@{ command -v containerd && command -v runc && test -x /usr/lib/cni/bridge; } >/dev/null || \
		{ echo "tools: installing Debian's containerd, runc and CNI plugins (test/realnode)"; \
		apt-get update && apt-get install -y --no-install-recommends containerd runc containernetworking-plugins; }

# Debian's chromium, which the fleet page's browser test (test/fleetpage) drives
# headless; apt-get installs it (as root) where there is none.
.PHONY: chromium
chromium:
	@command -v chromium >/dev/null || { echo "tools: installing Debian's chromium (the fleet page's browser test)"; \
		apt-get update && apt-get install -y --no-install-recommends chromium; }

# Each tool is built from a module of its own under tools/, so their dependency graphs
# never meet Chamber's. A binary is rebuilt only when its tools module changes.
# kube-controller-manager is upstream's with the Job controller's back-off as a flag,
# which the simulator scales (tools/kubernetes/kube-controller-manager).
$(KUBE_BINS) &: tools/kubernetes/go.mod tools/kubernetes/go.sum tools/kubernetes/kube-controller-manager/main.go
	@echo "tools: building kube-apiserver, kube-controller-manager, kube-scheduler, kubectl $(KUBE_VERSION) (cold: about 10 minutes)"
	@cd tools/kubernetes && $(GO) build -trimpath -ldflags '$(KUBE_LDFLAGS)' -o $(BIN)/ \
		k8s.io/kubernetes/cmd/kube-apiserver ./kube-controller-manager \
		k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
	@touch $(KUBE_BINS)

# The kubelet test/realnode runs on a real container runtime, beside the kwok nodes.
$(BIN)/kubelet: tools/kubernetes/go.mod tools/kubernetes/go.sum
	@echo "tools: building kubelet $(KUBE_VERSION)"
	@cd tools/kubernetes && $(GO) build -trimpath -ldflags '$(KUBE_LDFLAGS)' -o $@ k8s.io/kubernetes/cmd/kubelet

# Upstream's control-plane binaries of another Kubernetes, for the smoke suite.
define kube_smoke_rule
$(call kube_smoke_bins,$(1)) &: tools/kubernetes-1.$(call kube_minor,$(1))/go.mod tools/kubernetes-1.$(call kube_minor,$(1))/go.sum
	@echo "tools: building kube-apiserver, kube-controller-manager, kube-scheduler $(1) (cold: about 8 minutes)"
	@cd tools/kubernetes-1.$(call kube_minor,$(1)) && $$(GO) build -trimpath -ldflags '$(call kube_ldflags,$(1))' -o $$(BIN)/kubernetes-$(1)/ \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler
	@touch $(call kube_smoke_bins,$(1))
endef
$(eval $(call kube_smoke_rule,$(KUBE_OLDEST)))
$(eval $(call kube_smoke_rule,$(KUBE_NEWEST)))

$(BIN)/etcd: tools/etcd/go.mod tools/etcd/go.sum
	@echo "tools: building etcd"
	@cd tools/etcd && $(GO) build -trimpath -o $@ go.etcd.io/etcd/server/v3

$(BIN)/kwok: tools/kwok/go.mod tools/kwok/go.sum
	@echo "tools: building kwok"
	@cd tools/kwok && $(GO) build -trimpath -o $@ sigs.k8s.io/kwok/cmd/kwok

$(BIN)/controller-gen: tools/controller-gen/go.mod tools/controller-gen/go.sum
	@echo "tools: building controller-gen"
	@cd tools/controller-gen && $(GO) build -trimpath -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen

$(BIN)/helm: tools/helm/go.mod tools/helm/go.sum
	@echo "tools: building helm"
	@cd tools/helm && $(GO) build -trimpath -o $@ helm.sh/helm/v3/cmd/helm

$(BIN)/prometheus $(BIN)/promtool &: tools/prometheus/go.mod tools/prometheus/go.sum
	@echo "tools: building prometheus and promtool"
	@# remove_all_sd drops the cloud service-discovery plugins (and their SDKs, most of
	@# the build); Chamber's local Prometheus scrapes static loopback targets.
	@cd tools/prometheus && $(GO) build -trimpath -tags remove_all_sd -o $(BIN)/ \
		github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool
	@touch $(BIN)/prometheus $(BIN)/promtool

$(BIN)/staticcheck: tools/lint/go.mod tools/lint/go.sum
	@echo "tools: building staticcheck"
	@cd tools/lint && $(GO) build -trimpath -o $@ honnef.co/go/tools/cmd/staticcheck

# Volcano's scheduler and controller-manager (tools/volcano), which the local control
# plane runs on request; about 7 minutes cold on 2 cores, seconds with a warm build cache.
$(BIN)/vc-scheduler $(BIN)/vc-controller-manager &: tools/volcano/go.mod tools/volcano/go.sum
	@echo "tools: building vc-scheduler and vc-controller-manager (cold: about 7 minutes)"
	@cd tools/volcano && $(GO) build -trimpath -o $(BIN)/vc-scheduler volcano.sh/volcano/cmd/scheduler && \
		$(GO) build -trimpath -o $(BIN)/vc-controller-manager volcano.sh/volcano/cmd/controller-manager
	@touch $(BIN)/vc-scheduler $(BIN)/vc-controller-manager

# Volcano's CRDs from the pinned module: the chart's, plus the jobflow CRDs, without
# which the controller-manager waits on their informers and runs no job.
$(BIN)/volcano-crds/scheduling.volcano.sh_queues.yaml: tools/volcano/go.mod tools/volcano/go.sum
	@echo "tools: collecting Volcano's CRDs"
	@cd tools/volcano && $(GO) mod download volcano.sh/volcano && dir=$$($(GO) list -m -f '{{.Dir}}' volcano.sh/volcano) && \
		rm -rf $(BIN)/volcano-crds && mkdir -p $(BIN)/volcano-crds && \
		install -m 644 $$dir/installer/helm/chart/volcano/crd/bases/*.yaml $$dir/config/crd/jobflow/bases/*.yaml $(BIN)/volcano-crds/

# Kueue is built from Chamber's own go.mod, so the controller the tests run is the
# version Chamber compiles against, with one change (tools/kueue): its batch period,
# a 1 s constant upstream, is read from KUEUE_UPDATES_BATCH_PERIOD where that is set,
# for the simulator to scale, and the two periods that follow it upstream (the
# requeue of workloads that did not fit, 1 s; the TAS node controller's, 100 ms)
# follow it; unset, the binary is upstream's. The build copies Kueue's source beside
# the binary, renames the three constants (upstream...) and adds tools/kueue's files,
# which define variables of their names; a Kueue whose constants moved stops it with
# a message.
KUEUE_BATCH := [[:space:]]*UpdatesBatchPeriod[[:space:]]*= time\.Second
KUEUE_REQUEUE := [[:space:]]*requeueBatchPeriod[[:space:]]*= 1 \* time\.Second
KUEUE_TAS_NODE := [[:space:]]*reconcileBatchPeriod[[:space:]]*= 100 \* time\.Millisecond
$(BIN)/kueue: go.mod go.sum tools/kueue/constants.go.in tools/kueue/queue.go.in tools/kueue/tas.go.in
	@echo "tools: building kueue"
	@$(GO) mod download sigs.k8s.io/kueue && dir=$$($(GO) list -m -f '{{.Dir}}' sigs.k8s.io/kueue) && \
		src=$(BIN)/kueue-src && rm -rf $$src && mkdir -p $$src && cp -r $$dir/go.mod $$dir/apis $$dir/client-go $$dir/cmd $$dir/pkg $$src/ && \
		chmod -R u+w $$src && c=$$src/pkg/constants/constants.go && q=$$src/pkg/cache/queue/inadmissible_workloads.go && \
		t=$$src/pkg/controller/tas/node_controller.go && \
		{ grep -qx '$(KUEUE_BATCH)' $$c && grep -qx '$(KUEUE_REQUEUE)' $$q && grep -qx '$(KUEUE_TAS_NODE)' $$t || \
			{ echo "tools: Kueue's batch periods are not where tools/kueue expects them; update it"; exit 1; }; } && \
		sed -i 's/^\([[:space:]]*\)UpdatesBatchPeriod /\1upstreamUpdatesBatchPeriod /' $$c && \
		sed -i 's/^\([[:space:]]*\)requeueBatchPeriod /\1upstreamRequeueBatchPeriod /' $$q && \
		sed -i 's/^\([[:space:]]*\)reconcileBatchPeriod /\1upstreamReconcileBatchPeriod /' $$t && \
		cp tools/kueue/constants.go.in $$src/pkg/constants/chamber_batch.go && cp tools/kueue/queue.go.in $$src/pkg/cache/queue/chamber_batch.go && \
		cp tools/kueue/tas.go.in $$src/pkg/controller/tas/chamber_batch.go && \
		cp go.mod $$src.mod && cp go.sum $$src.sum && $(GO) mod edit -modfile=$$src.mod -replace sigs.k8s.io/kueue=$$src && \
		$(GO) build -modfile=$$src.mod -trimpath -o $@ sigs.k8s.io/kueue/cmd/kueue

# kwok's own Stage documents for node readiness, node heartbeats with leases and the
# general pod lifecycle, taken from the pinned kwok module.
KWOK_STAGES := kustomize/stage/node/fast/node-initialize.yaml \
	kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
	kustomize/stage/pod/general/pod-create.yaml kustomize/stage/pod/general/pod-ready.yaml \
	kustomize/stage/pod/general/pod-complete.yaml kustomize/stage/pod/general/pod-delete.yaml \
	kustomize/stage/pod/general/pod-init-container-running.yaml \
	kustomize/stage/pod/general/pod-init-container-completed.yaml
$(BIN)/kwok-stages.yaml: tools/kwok/go.mod tools/kwok/go.sum
	@echo "tools: collecting kwok's stages"
	@cd tools/kwok && $(GO) mod download sigs.k8s.io/kwok && dir=$$($(GO) list -m -f '{{.Dir}}' sigs.k8s.io/kwok) && \
		for f in $(KWOK_STAGES); do echo "---"; cat "$$dir/$$f"; done > $@.tmp && mv $@.tmp $@

# Kueue's CRDs and webhook configurations, from the Kueue module of the go.mod in
# folder $(1), into the folder of the target, its webhooks.yaml.
kueue_manifests = cd $(1) && $(GO) mod download sigs.k8s.io/kueue && dir=$$($(GO) list -m -f '{{.Dir}}' sigs.k8s.io/kueue) && \
	rm -rf $(@D) && mkdir -p $(@D)/crds && \
	install -m 644 $$dir/config/components/crd/bases/*.yaml $(@D)/crds/ && \
	install -m 644 $$dir/config/components/webhook/manifests.yaml $@
$(BIN)/kueue-manifests/webhooks.yaml: go.mod go.sum
	@echo "tools: collecting Kueue's CRDs and webhook manifests"
	@$(call kueue_manifests,$(CURDIR))

# Kueue's previous minor, upstream's build (its version stamped, as its release's is),
# and its manifests.
$(KUEUE_PREVIOUS_DIR)/kueue: $(KUEUE_PREVIOUS_MOD)/go.mod $(KUEUE_PREVIOUS_MOD)/go.sum
	@echo "tools: building kueue $(KUEUE_PREVIOUS)"
	@cd $(KUEUE_PREVIOUS_MOD) && $(GO) build -trimpath -ldflags '-X sigs.k8s.io/kueue/pkg/version.GitVersion=$(KUEUE_PREVIOUS)' \
		-o $@ sigs.k8s.io/kueue/cmd/kueue
$(KUEUE_PREVIOUS_DIR)/kueue-manifests/webhooks.yaml: $(KUEUE_PREVIOUS_MOD)/go.mod $(KUEUE_PREVIOUS_MOD)/go.sum
	@echo "tools: collecting Kueue $(KUEUE_PREVIOUS)'s CRDs and webhook manifests"
	@$(call kueue_manifests,$(KUEUE_PREVIOUS_MOD))
