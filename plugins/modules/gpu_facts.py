#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Gather NVIDIA GPU, IOMMU, kernel and driver facts from sysfs, procfs and NVML
version_added: 0.1.0
description:
  - Reads everything the collection needs to know about a GPU node in one call, from
    C(/sys), C(/proc), C(/etc) and C(/lib/modules), and enriches it with NVML answers when
    the C(pynvml) library (package C(nvidia-ml-py)) imports and the driver answers.
  - Reports every NVIDIA PCI function with its IOMMU group and companions, IOMMU and
    virtualisation state, kernel modules, driver version and module type, Secure Boot,
    and the node labels Node Feature Discovery and GPU Feature Discovery would set.
  - Needs only the Python standard library on the target; NVML is optional.
author:
  - gpuops.nvidia contributors (@gpuops)
options:
  gather_subset:
    description:
      - Which groups of facts to gather.
      - V(pci) lists NVIDIA functions; V(iommu) adds IOMMU state and group viability
        (and implies reading PCI); V(kernel) the running kernel; V(driver) the NVIDIA
        driver and Secure Boot; V(runtime) the container runtimes found on the host; V(nvml) asks NVML;
        V(all) is all of them.
      - O(gather_subset) values that are not listed are refused before anything is read.
    type: list
    elements: str
    default: [all]
  root:
    description:
      - Path prefix under which C(/sys), C(/proc), C(/dev), C(/etc) and C(/lib/modules) are read.
      - Used to read a node root captured elsewhere, or a container's view of the host.
      - NVML always talks to the running driver, so set O(gather_subset) without V(nvml)
        when O(root) is not the running host.
    type: path
    default: /
  gfd_config:
    description:
      - A device plugin / GPU Feature Discovery config (the upstream C(version) v1 format with C(flags)
        and C(sharing)) the GFD labels are computed under, as GFD computes them with C(--config-file) -
        time-slicing or MPS replicas change C(nvidia.com/gpu.replicas), C(gpu.sharing-strategy),
        C(gpu.product) (C(-SHARED)) and C(mps.capable).
      - Omitted, the labels are those of GFD without a config file.
    type: dict
  require_gpu:
    description:
      - Fail, after gathering, when no NVIDIA GPU was found - for a node whose inventory gives it a GPU
        workload kind (the C(discovery) role sets it from C(gpu_workload)).
      - Needs a O(gather_subset) that reads PCI (V(pci), V(iommu) or V(all)); refused otherwise before
        anything is read.
    type: bool
    default: false
    version_added: 0.3.0
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.attributes.facts
attributes:
  check_mode:
    support: full
    details: Only reads; runs the same in check mode.
  diff_mode:
    support: none
    details: Nothing is changed, so there is nothing to diff.
  facts:
    support: full
  idempotent:
    support: full
notes:
  - Unreadable files become warnings; a host without NVIDIA devices is a normal answer
    with empty lists.
  - Only regular files are read, never blocking and never more than a bound (64 KiB for a sysfs or procfs
    attribute, 1 MiB for C(/proc/modules), 8 MiB for C(pci.ids), the first 256 KiB of C(/proc/cpuinfo)). A
    FIFO, socket, device node or directory where a file should be, or a larger file, is not read and becomes a
    warning (in RV(ansible_facts.gpu.warnings) too), so a node cannot make the module hang or flood the facts.
  - Without C(pynvml), or when the driver does not answer, no C(nvml) key is returned and
    a note says why.
  - Product, memory and compute capability come from NVML when it answered, else from a
    built-in table of data-centre and workstation GPUs (nominal values).
seealso:
  - name: NVIDIA GPU Feature Discovery labels
    description: The label names this module computes.
    link: https://github.com/NVIDIA/k8s-device-plugin
"""

EXAMPLES = r"""
- name: Gather everything
  gpuops.nvidia.gpu_facts:

- name: Only PCI and IOMMU (fast, no NVML)
  gpuops.nvidia.gpu_facts:
    gather_subset: [pci, iommu]

- name: Read a captured node tree
  gpuops.nvidia.gpu_facts:
    root: /srv/noderoots/h200
    gather_subset: [pci, iommu, kernel, driver]

- name: Refuse passthrough on hosts whose GPU groups hold foreign devices
  ansible.builtin.assert:
    that: ansible_facts.gpu.devices | rejectattr('passthrough_viable') | list | length == 0
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to ansible_facts.
  returned: always
  type: dict
  contains:
    gpu:
      description: Everything gathered.
      returned: always
      type: dict
      contains:
        root:
          description: The root the facts were read under.
          type: str
          returned: always
        gather_subset:
          description: The subsets gathered, V(all) expanded.
          type: list
          elements: str
          returned: always
        devices:
          description:
            - One entry per NVIDIA GPU function (vendor 0x10de, display class 0x03xx).
            - Keys C(bdf), C(vendor_id), C(device_id), C(class_id) (hex, lower case, no C(0x)),
              C(pci_id), C(subsystem_vendor_id), C(subsystem_device_id), C(revision), C(name),
              C(driver) (bound driver or null), C(driver_override), C(iommu_group), C(numa_node),
              C(boot_vga), C(link) (C(current_speed), C(current_width), C(max_speed), C(max_width)),
              C(sriov) (C(total_vfs), C(num_vfs); null when not SR-IOV capable), C(physfn),
              C(companions) (other NVIDIA functions in the IOMMU group, or of the same slot when
              there are no groups), C(iommu_group_members) (every other endpoint of the group),
              C(iommu_group_foreign) (non-NVIDIA endpoints of the group), C(passthrough_viable),
              C(mode) (compute/graphics), C(product), C(memory_mib), C(compute_capability),
              C(mig_capable), C(mig_enabled), C(uuid) and C(facts_source) (nvml, builtin or null).
          type: list
          elements: dict
          returned: when O(gather_subset) has V(pci) or V(iommu)
        nvswitches:
          description: NVIDIA bridge-class (0x0680) functions, same keys as PCI functions in RV(ansible_facts.gpu.devices).
          type: list
          elements: dict
          returned: when O(gather_subset) has V(pci) or V(iommu)
        others:
          description: Remaining NVIDIA functions (for example HDMI audio, class 0x0403).
          type: list
          elements: dict
          returned: when O(gather_subset) has V(pci) or V(iommu)
        count:
          description: Number of GPU functions.
          type: int
          returned: when O(gather_subset) has V(pci) or V(iommu)
        pci_ids_source:
          description: Path of the host's pci.ids used for names, or V(builtin).
          type: str
          returned: when O(gather_subset) has V(pci) or V(iommu)
        iommu:
          description:
            - C(enabled) (IOMMU units under /sys/class/iommu and groups exist), C(vendor)
              (intel, amd, arm, virtio or null), C(units), C(groups) (count), C(kernel_args)
              (IOMMU/VFIO related kernel arguments present), C(cpu_virtualization) (vmx/svm flags).
          type: dict
          returned: when O(gather_subset) has V(iommu)
        kernel:
          description:
            - C(release), C(cmdline), C(args) (parsed), C(nouveau_loaded), C(nova_core_loaded),
              C(nvidia_modules), C(vfio_modules) (loaded ones), C(headers_present) (build tree for
              the running kernel, null when the release is unknown).
          type: dict
          returned: when O(gather_subset) has V(kernel)
        os:
          description: C(id), C(version_id), C(id_like), C(pretty_name) from os-release.
          type: dict
          returned: when O(gather_subset) has V(kernel)
        driver:
          description:
            - C(loaded), C(version) (from /proc/driver/nvidia/version or /sys/module/nvidia/version),
              C(kernel_module_type) (open or proprietary), C(gpus) (from /proc/driver/nvidia/gpus),
              C(persistenced_running), C(fabricmanager_running), C(device_nodes) (/dev/nvidia*).
          type: dict
          returned: when O(gather_subset) has V(driver)
        secure_boot:
          description: Secure Boot state; null when the host did not boot through UEFI.
          type: bool
          returned: when O(gather_subset) has V(driver)
        container_runtimes:
          description:
            - The container runtimes found on the host (containerd, CRI-O as C(crio), Docker), not the ones an
              inventory names; one entry for each whose daemon binary or API socket is there.
            - C(name), C(binary) and C(socket) (the path found, or null), C(running) (its API socket is a Unix socket).
            - File types only are looked at; nothing is opened or run.
          type: list
          elements: dict
          returned: when O(gather_subset) has V(runtime)
        nvml:
          description:
            - C(driver_version), C(nvml_version), C(cuda_driver_version), C(errors) and C(devices),
              each with C(index), C(name), C(uuid), C(serial), C(bdf), C(memory_mib),
              C(compute_capability), C(architecture), C(vbios), C(persistence_mode),
              C(mig_capable), C(mig_mode) (C(current), C(pending)) and C(gi_profiles) (GPU-instance
              profiles with slices, memory, engines and placements).
          type: dict
          returned: when O(gather_subset) has V(nvml), pynvml imports and the driver answers
        machine:
          description: DMI product name, or null.
          type: str
          returned: always
        labels:
          description: NFD and GFD node labels that can be known from what was gathered.
          type: dict
          returned: always
          sample:
            feature.node.kubernetes.io/pci-10de.present: "true"
            nvidia.com/gpu.product: NVIDIA-H200
            nvidia.com/gpu.count: "1"
        notes:
          description: Why optional parts (NVML) are missing.
          type: list
          elements: str
          returned: always
        warnings:
          description:
            - The node files that could not be read and why (not a regular file, larger than its bound, an
              error), as the module's warnings say them; empty when everything was read.
          type: list
          elements: str
          returned: always
          version_added: 0.3.0
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import GpuopsError, fail
from ansible_collections.gpuops.nvidia.plugins.module_utils._files import path_problem
from ansible_collections.gpuops.nvidia.plugins.module_utils._gpu_facts import gather, resolve_subsets
from ansible_collections.gpuops.nvidia.plugins.module_utils._labels import parse_config


def argument_spec():
    return dict(
        gather_subset=dict(type="list", elements="str", default=["all"]),
        root=dict(type="path", default="/"),
        gfd_config=dict(type="dict"),
        require_gpu=dict(type="bool", default=False),
    )


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    try:
        subsets = resolve_subsets(module.params["gather_subset"])
    except GpuopsError as exc:
        fail(module, exc)
    if module.params["require_gpu"] and not {"pci", "iommu"} & set(subsets):
        module.fail_json(msg="require_gpu needs a gather_subset that reads PCI (pci, iommu or all); got %s"
                         % ", ".join(module.params["gather_subset"]))
    root = module.params["root"]
    problem = path_problem(root, "root")
    if problem:
        module.fail_json(msg=problem)
    if not os.path.isdir(root):
        module.fail_json(msg="root %s is not a directory (the node tree to read /sys, /proc and /etc under)" % root)
    try:
        # checked whether or not the node has GPUs (the labels, and so the config, are only read with GPUs)
        parse_config(module.params["gfd_config"])
    except GpuopsError as exc:
        fail(module, exc, msg="gfd_config: %s" % exc)
    try:
        facts, warnings = gather(module.params["root"], subsets, gfd_config=module.params["gfd_config"])
    except GpuopsError as exc:
        fail(module, exc, msg="gfd_config: %s" % exc)
    for warning in warnings:
        module.warn(warning)
    if module.params["require_gpu"] and not facts["count"]:
        module.fail_json(msg="no NVIDIA GPU was found under %s, but this node has a GPU workload kind (require_gpu): "
                         "give it no gpu_workload, or check the GPU is seen on the PCI bus (lspci -d 10de:)" % root)
    module.exit_json(changed=False, ansible_facts={"gpu": facts})


if __name__ == "__main__":
    main()
