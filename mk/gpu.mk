# GPU node lane (issue 11): the lent H200 turned into a GPU node by site.yml, pods getting the GPU
# through NVIDIA's own device plugin and a standalone kubelet.  Two halves:
#   make gpu-bundle   here: builds (cached under ~/.cache/gpuops/gpu) and packs .gpu-bundle/
#   make test-gpu     there: runs tests/lab/gpu/run.sh (carry .gpu-bundle and .collections)
# docs/gpu-lane.md says how to rerun it; results are committed under tests/lab/h200/results/.

.PHONY: gpu-bundle test-gpu test-gpu-bundle gpu-cluster-kit

gpu-bundle: venv install ## build and pack what the GPU node lane carries (.gpu-bundle/)
	@# one containerd and one toolkit version for both lanes (mk/runtime.mk names them; containerd comes from
	@# plugins/module_utils/_containerd_releases.py, build.sh reads the same when run on its own)
	CONTAINERD_VERSION=$(CONTAINERD2_VERSION) NVIDIA_CTK_VERSION=$(NVIDIA_CTK_VERSION) bash tests/lab/gpu/build.sh

test-gpu: ## run ON the GPU machine: the GPU node lane (needs .gpu-bundle and .collections)
	bash tests/lab/gpu/run.sh

test-gpu-bundle: gpu-bundle ## CI: the bundle builds from a fresh clone and every carried binary runs here
	bash tests/lab/gpu/check-bundle.sh
BESIDE_TEST_TARGETS += test-gpu-bundle

# GPU cluster lane: the lent GPU machine as a one-node cluster (control plane, kubelet, containerd), site.yml with
# the API server, the component DaemonSets on the GPU.  Two calls there, back to back (docs/gpu-lane.md):
#   tests/lab/gpu/cluster.sh stage | stage | run   (carry .gpu-cluster/a, .gpu-cluster/c, then .gpu-cluster/b)
# DEVICE_PLUGIN_GIT=<git dir of NVIDIA/k8s-device-plugin> builds the device plugin, GFD and config-manager at the
# version the roles pin (tests/lab/gpu/build.sh); without it, the newest the Go module proxy serves (v0.17.4).
# GPU_OPERATOR_GIT and MIG_PARTED_GIT (git dirs of NVIDIA/gpu-operator, NVIDIA/mig-parted): the validator's and the
# MIG manager's binaries for their steps; without them those steps are not run (a failed check says so).
# DRA_DRIVER_GIT (git dir of kubernetes-sigs/dra-driver-nvidia-gpu): NVIDIA's GPU kubelet plugin in .gpu-cluster/d for
# the DRA step (GPUC_ONLY=dra)
gpu-cluster-kit: venv install ## build and pack the GPU cluster lane's parts (.gpu-cluster/a, b, c, and d with DRA)
	CONTAINERD_VERSION=$(CONTAINERD2_VERSION) NVIDIA_CTK_VERSION=$(NVIDIA_CTK_VERSION) bash tests/lab/gpu/cluster.sh pack
