# Cluster lane: real kube-apiserver/etcd/controller-manager/scheduler built from Go modules,
# KWOK-simulated GPU nodes, and the cluster roles run against them.
#   make cluster-build                   build + cache the binaries (GPUOPS_CACHE/cluster/bin)
#   make cluster-up [NODES=spec.yml]     start the control plane, sync the spec's nodes
#   make cluster-down                    stop it (state and logs kept; CLUSTER_PURGE=1 wipes)
#   make test-cluster                    the lane: up -> pytest proofs -> down (logs kept on failure), then
#                                        a real kubelet node (tests/lab/kubenode) on a control plane of its own
#   make bench-cluster                   benchmarks/cluster_deploy at 10/100/1000 nodes
CLUSTER_DIR_LAB ?= $(GPUOPS_CACHE)/cluster/run
NODES           ?= $(ROOT)/tests/lab/cluster/nodes/default.yml
CLUSTER_ENV     := GPUOPS_CACHE=$(GPUOPS_CACHE) CLUSTER_DIR=$(CLUSTER_DIR_LAB) PYTHON=$(PY)
BENCH_NODES     ?= 10 100 1000

.PHONY: cluster-build cluster-up cluster-down test-cluster bench-cluster kubenode-bin test-kubenode

cluster-build: ## build + cache control plane, etcd, KWOK, helm from Go modules
	$(CLUSTER_ENV) tests/lab/cluster/build.sh

cluster-up: $(VENV)/.stamp cluster-build ## start the lab cluster (NODES=spec.yml)
	$(CLUSTER_ENV) tests/lab/cluster/up.sh $(NODES)

cluster-down: ## stop the lab cluster (CLUSTER_PURGE=1 also removes its state)
	$(CLUSTER_ENV) tests/lab/cluster/down.sh $(if $(CLUSTER_PURGE),--purge)

test-cluster: install cluster-build kubenode-bin ## cluster lane: placement, labels, idempotence, moves, uninstall, bad input, helm path, a real node
	$(CLUSTER_ENV) tests/lab/cluster/run-tests.sh $(CLUSTER_TEST_ARGS)

test-kubenode: install cluster-build kubenode-bin ## the cluster lane's real node alone (tests/lab/cluster/run-kubenode.sh)
	$(CLUSTER_ENV) tests/lab/cluster/run-kubenode.sh $(CLUSTER_TEST_ARGS)

# the real node's binaries (containerd, runc, kubelet, NFD, the device plugin, GFD, config-manager, CNI loopback):
# the GPU bundle's build, binaries only; it waits while the other test queue builds the same (one lock)
kubenode-bin: ## build + cache the cluster lane's real-node binaries (GPUOPS_CACHE/gpu/bin)
	CONTAINERD_VERSION=$(CONTAINERD2_VERSION) NVIDIA_CTK_VERSION=$(NVIDIA_CTK_VERSION) bash tests/lab/gpu/build.sh bin

bench-cluster: install cluster-build ## benchmarks/cluster_deploy at $(BENCH_NODES) KWOK nodes
	$(CLUSTER_ENV) tests/lab/cluster/build.sh kubectl
	$(CLUSTER_ENV) $(PY) benchmarks/cluster_deploy/run.py --nodes $(BENCH_NODES) --out benchmarks/cluster_deploy/results.json

EXTRA_TEST_TARGETS += test-cluster
