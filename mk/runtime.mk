# Runtime lane (issue 4): container_runtime / cdi_spec modules, container_toolkit role,
# against real daemons: Debian's containerd 1.6 + dockerd 20.10, containerd 2.x and CRI-O built from Go modules.
# Everything is installed from nothing by runtime-deps; reruns are guarded and fast.

RUNTIME_CACHE       := $(GPUOPS_CACHE)/runtime
GPU_BUNDLE_BIN      := $(GPUOPS_CACHE)/gpu/bin
GPU_BUNDLE_STAMPS   := $(GPUOPS_CACHE)/gpu/stamps
# the lanes' containerd 2.x: plugins/module_utils/_containerd_releases.py (the one place it is named);
# CONTAINERD2_VERSION=vX.Y.Z in the environment or on the command line still wins
ifeq ($(origin CONTAINERD2_VERSION),undefined)
CONTAINERD2_VERSION := $(shell $(PYTHON3) $(ROOT)/docs/render_data.py --get containerd.lane)
endif
CONTAINERD2_BIN     := $(RUNTIME_CACHE)/containerd-$(CONTAINERD2_VERSION)/bin
NVIDIA_CTK_VERSION  ?= v1.20.2
NVIDIA_CTK_BIN      := $(RUNTIME_CACHE)/nvidia-ctk-$(NVIDIA_CTK_VERSION)/bin/nvidia-ctk
RUNTIME_GO_ENV      := GOFLAGS=-buildvcs=false
RUNTIME_APT_PKGS    := containerd runc docker.io conmon

.PHONY: runtime-deps runtime-apt runtime-containerd2 runtime-nvidia-ctk runtime-cdivalidate runtime-crio test-runtime bench-runtime

runtime-apt: ## Debian containerd 1.6, runc, dockerd, conmon (no daemon is started)
	@if command -v containerd >/dev/null && command -v ctr >/dev/null && command -v dockerd >/dev/null && command -v runc >/dev/null \
	    && command -v conmon >/dev/null; then \
	  echo "runtime-apt: containerd, ctr, runc, dockerd, conmon present"; \
	else \
	  apt-get -o DPkg::Lock::Timeout=600 update -q && \
	  apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends $(RUNTIME_APT_PKGS); \
	fi

runtime-containerd2: $(CONTAINERD2_BIN)/containerd $(CONTAINERD2_BIN)/ctr ## containerd 2.x + ctr from Go modules (cached)
$(CONTAINERD2_BIN)/containerd $(CONTAINERD2_BIN)/ctr:
	@[ -n "$(CONTAINERD2_VERSION)" ] || { echo "CONTAINERD2_VERSION is empty: $(PYTHON3) docs/render_data.py --get containerd.lane failed" >&2; exit 1; }
	mkdir -p $(CONTAINERD2_BIN)
	@# the GPU node bundle (make gpu-bundle, before this lane in make test) builds the same version with the
	@# same tags and CGO off: reuse its binary rather than compile containerd a second time on a cold machine
	if [ -x $(GPU_BUNDLE_BIN)/$(notdir $@) ] && \
	   [ "$$(cat $(GPU_BUNDLE_STAMPS)/$(notdir $@) 2>/dev/null)" = "containerd-$(CONTAINERD2_VERSION)" ]; then \
	  cp $(GPU_BUNDLE_BIN)/$(notdir $@) $@.tmp && mv $@.tmp $@ && echo "$(notdir $@): from the GPU bundle's build"; \
	else \
	  cd /tmp && GOBIN=$(CONTAINERD2_BIN) CGO_ENABLED=0 $(RUNTIME_GO_ENV) nice -n 10 \
	    go install -tags "no_btrfs no_devmapper no_zfs" github.com/containerd/containerd/v2/cmd/$(notdir $@)@$(CONTAINERD2_VERSION); \
	fi

runtime-nvidia-ctk: $(NVIDIA_CTK_BIN) ## nvidia-ctk from Go modules (cached), for comparisons
$(NVIDIA_CTK_BIN):
	mkdir -p $(dir $@)
	cd /tmp && GOBIN=$(dir $@) CGO_ENABLED=1 $(RUNTIME_GO_ENV) nice -n 10 \
	  go install github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk@$(NVIDIA_CTK_VERSION)

CDIVALIDATE_BIN     := $(RUNTIME_CACHE)/cdivalidate/cdivalidate
runtime-cdivalidate: $(CDIVALIDATE_BIN) ## the reference CDI Go library as a spec checker (cached)
$(CDIVALIDATE_BIN): tests/lab/runtime/cdivalidate/main.go tests/lab/runtime/cdivalidate/go.mod
	mkdir -p $(dir $@)
	cd tests/lab/runtime/cdivalidate && CGO_ENABLED=0 $(RUNTIME_GO_ENV) nice -n 10 go build -o $@ .

# CRI-O (the runtime lane's real daemon, tests/lab/runtime/test_crio.py): `go install` is refused (the proxy
# answers 403 for the module's version list), so crio is built from a throw-away module that requires it;
# pinns is compiled from the same module's source (its C files ship in the module zip); crictl from
# cri-tools' module at the same minor; conmon comes from Debian (runtime-apt).  About 3 min of CPU on a cold
# Go cache, most of it shared with the cluster lane's Kubernetes build.
CRIO_VERSION        ?= v1.34.0
CRICTL_VERSION      ?= v1.34.0
CRIO_DIR            := $(RUNTIME_CACHE)/crio-$(CRIO_VERSION)/bin
CRIO_BIN            := $(CRIO_DIR)/crio
CRIO_BUILD          := /tmp/gpuops-crio-build
runtime-crio: $(CRIO_BIN) $(CRIO_DIR)/pinns $(CRIO_DIR)/crictl ## CRI-O, pinns, crictl from Go modules (cached)
$(CRIO_BIN):
	rm -rf $(CRIO_BUILD) && mkdir -p $(CRIO_BUILD) $(dir $@)
	cd $(CRIO_BUILD) && go mod init gpuops/criobuild >/dev/null && go get github.com/cri-o/cri-o/cmd/crio@$(CRIO_VERSION) && \
	  CGO_ENABLED=1 GOFLAGS="-buildvcs=false -mod=mod" nice -n 10 go build \
	  -tags "containers_image_openpgp exclude_graphdriver_btrfs exclude_graphdriver_devicemapper" -o $@.tmp github.com/cri-o/cri-o/cmd/crio
	mv $@.tmp $@ && rm -rf $(CRIO_BUILD)
$(CRIO_DIR)/pinns:
	rm -rf $(CRIO_BUILD)-pinns && mkdir -p $(CRIO_BUILD)-pinns $(dir $@)
	cd $(CRIO_BUILD)-pinns && go mod init gpuops/pinnsbuild >/dev/null && go mod download github.com/cri-o/cri-o@$(CRIO_VERSION) && \
	  cp -r "$$(go list -m -f '{{.Dir}}' github.com/cri-o/cri-o@$(CRIO_VERSION))/pinns" src && chmod -R u+w src && \
	  nice -n 10 $(MAKE) -C src ../bin/pinns && cp bin/pinns $@.tmp
	mv $@.tmp $@ && rm -rf $(CRIO_BUILD)-pinns
$(CRIO_DIR)/crictl:
	rm -rf $(CRIO_BUILD)-crictl && mkdir -p $(CRIO_BUILD)-crictl $(dir $@)
	cd $(CRIO_BUILD)-crictl && go mod init gpuops/crictlbuild >/dev/null && go get sigs.k8s.io/cri-tools/cmd/crictl@$(CRICTL_VERSION) && \
	  CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=mod" nice -n 10 go build -o $@.tmp sigs.k8s.io/cri-tools/cmd/crictl
	mv $@.tmp $@ && rm -rf $(CRIO_BUILD)-crictl

runtime-deps: runtime-apt runtime-containerd2 runtime-cdivalidate runtime-crio kubenode-bin

test-runtime: install runtime-deps ## runtime lane: unit tests + real containerd 1.6/2.x, dockerd and CRI-O
	GPUOPS_COLLECTIONS=$(COLLECTIONS) $(BIN)/pytest -q tests/unit/plugins/module_utils/test_toml.py tests/unit/plugins/module_utils/test_container_runtime.py \
	  tests/unit/plugins/module_utils/test_cdi.py tests/unit/plugins/modules/test_container_runtime_module.py
	CRIO_VERSION=$(CRIO_VERSION) $(BIN)/pytest -q -p no:cacheprovider tests/lab/runtime $(RUNTIME_TEST_ARGS)

bench-runtime: install runtime-deps runtime-nvidia-ctk ## module time per config vs nvidia-ctk --dry-run
	$(PY) benchmarks/runtime/run.py --nvidia-ctk $(NVIDIA_CTK_BIN) --containerd2 $(CONTAINERD2_BIN)/containerd \
	  --out benchmarks/runtime/results-local.json

BESIDE_TEST_TARGETS += test-runtime
