# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""The cluster components' images: one data file, read by the code, the docs and the tests.

PRIVATE: may change at any time; not for use outside gpuops.nvidia.

Pure data (no imports): docs/render_data.py loads it on its own. Each component role's
``<role>_image`` default (defaults/main.yml and meta/argument_specs.yml) is this table's entry;
``python docs/render_data.py --write`` rewrites those two places and the docs table from it, and
tests/unit/meta/test_components_data.py fails when any of them differs.

role -> ClusterPolicy key (None: no ClusterPolicy image field), repository, image, version.
Versions are those of GPU Operator v26.7.0 (NFD: its node-feature-discovery subchart).
"""

OPERATOR_VERSION = "v26.7.0"

IMAGES = {
    "device_plugin": {"clusterpolicy": "devicePlugin", "repository": "nvcr.io/nvidia", "image": "k8s-device-plugin",
                      "version": "v0.20.0"},
    "gfd": {"clusterpolicy": "gfd", "repository": "nvcr.io/nvidia", "image": "k8s-device-plugin",
            "version": "v0.20.0"},
    "dcgm_exporter": {"clusterpolicy": "dcgmExporter", "repository": "nvcr.io/nvidia/k8s", "image": "dcgm-exporter",
                      "version": "4.6.0-4.8.3-distroless"},
    "mig_manager": {"clusterpolicy": "migManager", "repository": "nvcr.io/nvidia/cloud-native",
                    "image": "k8s-mig-manager", "version": "v0.15.0"},
    "validator": {"clusterpolicy": "validator", "repository": "nvcr.io/nvidia", "image": "gpu-operator",
                  "version": "v26.7.0"},
    "vgpu_device_manager": {"clusterpolicy": "vgpuDeviceManager", "repository": "nvcr.io/nvidia/cloud-native",
                            "image": "vgpu-device-manager", "version": "v0.5.0"},
    "sandbox_device_plugin": {"clusterpolicy": "sandboxDevicePlugin", "repository": "nvcr.io/nvidia",
                              "image": "kubevirt-gpu-device-plugin", "version": "v1.6.0"},
    # GPU Operator v26.7.0 deploys it from its GPUCluster resource (spec.draDriver), not from ClusterPolicy
    "dra_driver": {"clusterpolicy": None, "repository": "nvcr.io/nvidia", "image": "dra-driver-nvidia-gpu",
                   "version": "v0.5.0"},
    "nfd": {"clusterpolicy": None, "repository": "registry.k8s.io/nfd", "image": "node-feature-discovery",
            "version": "v0.19.0"},
}
