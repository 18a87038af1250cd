#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_validate
short_description: Validate a GPU node for real, from the host, the way the GPU Operator's validator pods do
version_added: 0.1.0
description:
  - Runs the GPU Operator validator's checks directly on the node, agentless and without pods, in about a
    second instead of minutes.
  - C(driver) reads C(/proc/driver/nvidia/version) and lists the GPUs through NVML (C(pynvml) when importable,
    else C(libnvidia-ml.so.1) through ctypes); reports the driver version and the GPU UUIDs; fails when the
    kernel module and the user-space driver differ.
  - C(cuda) JIT-compiles a PTX C(vectorAdd) kernel through the CUDA driver API (C(libcuda.so.1)), runs it on
    every GPU (or O(cuda_device)) and compares the result on the host.
  - C(toolkit) runs O(runtime_path) and the CDI hook with C(--version); checks that the CDI specs of kind
    C(nvidia.com/gpu) in O(cdi_spec_dirs) name every GPU the driver check found (by UUID, or by index as
    C(nvidia-ctk)'s C(index) naming does) and that every device node, mount and hook they reference exists;
    with O(containerd_config_dump_cmd), that containerd's effective configuration has the CRI runtime
    O(runtime_name).
  - C(device_plugin) reads kubelet's device manager checkpoint for the healthy devices of O(resource_name)
    (kubelet's own view, so time-slicing replicas count) and checks that kubelet's and a device plugin's
    sockets accept connections.
  - Never changes anything. Fails, naming each failed check and what to fix, unless O(fail_on_error=false).
author:
  - gpuops.nvidia contributors (@gpuops)
options:
  checks:
    description: Checks to run; they always run in the order C(driver), C(cuda), C(toolkit), C(device_plugin).
    type: list
    elements: str
    choices: [driver, cuda, toolkit, device_plugin]
    default: [driver, cuda, toolkit, device_plugin]
  runtime_path:
    description: The NVIDIA container runtime binary.
    type: path
    default: /usr/bin/nvidia-container-runtime
  hook_path:
    description:
      - The CDI hook binary (C(nvidia-cdi-hook), or C(nvidia-ctk)).
      - Default the hook the CDI specs reference, else the first C(nvidia-cdi-hook) or C(nvidia-ctk) in
        C(PATH), C(/usr/bin), C(/usr/local/bin), C(/usr/local/nvidia/toolkit).
    type: path
  cdi_spec_dirs:
    description: Directories holding CDI specs (C(*.yaml), C(*.yml), C(*.json)).
    type: list
    elements: path
    default: [/etc/cdi, /var/run/cdi]
  containerd_config_dump_cmd:
    description:
      - Command printing containerd's effective configuration, for example
        V([containerd, --config, /etc/containerd/config.toml, config, dump]).
      - When set, the C(toolkit) check requires the CRI runtime O(runtime_name) in its output (and its
        C(BinaryName) to exist). When unset, containerd is not checked.
    type: list
    elements: str
  runtime_name:
    description: Name of the NVIDIA runtime in containerd's CRI runtimes.
    type: str
    default: nvidia
  kubelet_dir:
    description: kubelet's root directory (its C(device-plugins/) holds the checkpoint and the sockets).
    type: path
    default: /var/lib/kubelet
  resource_name:
    description: Extended resource the device plugin advertises.
    type: str
    default: nvidia.com/gpu
  cuda_elements:
    description: Vector length of the CUDA C(vectorAdd) check.
    type: int
    default: 50000
  cuda_device:
    description: V(all), or one CUDA device ordinal, for the CUDA check.
    type: str
    default: all
  command_timeout:
    description: Seconds each command (C(--version), C(config dump)) may run.
    type: int
    default: 30
  fail_on_error:
    description:
      - Fail when a requested check fails.
      - When false the module returns RV(ok=false) and RV(failed_checks) instead.
    type: bool
    default: true
extends_documentation_fragment:
  - gpuops.nvidia.attributes
attributes:
  check_mode:
    support: full
    details: Only reads and runs a CUDA kernel; runs the same in check mode.
  diff_mode:
    support: none
    details: Nothing is changed.
  idempotent:
    support: full
notes:
  - Needs root (or membership that opens C(/dev/nvidia*), kubelet's C(device-plugins/) and runs C(containerd)).
  - The CUDA check is the file C(plugins/module_utils/_cuda.py), standard library only; copied into a
    container image, C(python3 _cuda.py) runs the same check inside a pod.
  - Without a GPU node, C(driver) and C(cuda) fail with the NVML or CUresult error name.
seealso:
  - module: gpuops.nvidia.gpu_facts
  - module: gpuops.nvidia.cdi_spec
  - module: gpuops.nvidia.container_runtime
  - name: GPU Operator validator
    description: The in-cluster validator whose checks this module runs from the host.
    link: https://github.com/NVIDIA/gpu-operator/tree/main/validator
"""

EXAMPLES = r"""
- name: Validate the node (driver, CUDA, toolkit, device plugin)
  gpuops.nvidia.gpu_validate:
  register: gpu_validate_result

- name: One line
  ansible.builtin.debug:
    msg: "{{ gpu_validate_result.summary }}"

- name: Driver and CUDA only, report without failing
  gpuops.nvidia.gpu_validate:
    checks: [driver, cuda]
    fail_on_error: false
  register: gpu_validate_result

- name: Also check containerd's effective configuration
  gpuops.nvidia.gpu_validate:
    checks: [toolkit]
    containerd_config_dump_cmd: [containerd, --config, /etc/containerd/config.toml, config, dump]
    runtime_name: nvidia
"""

RETURN = r"""
ok:
  description: Every requested check passed.
  type: bool
  returned: always
  sample: true
failed_checks:
  description: Names of the checks that failed.
  type: list
  elements: str
  returned: always
  sample: []
wall_seconds:
  description: Time all checks took together.
  type: float
  returned: always
  sample: 1.234
summary:
  description: One line with each check's outcome and the wall time.
  type: str
  returned: always
  sample: "GPU node validation passed in 1.23 s: driver ok (580.159.04, 1 GPU); cuda ok (vectorAdd on 1 device, 50000 elements, 0 mismatches)"
checks:
  description:
    - One entry per check run, in order, with C(name), C(ok), C(seconds), C(error) (null when ok), C(summary)
      and C(detail).
    - C(driver) detail has C(driver_version), C(kernel_module_version), C(kernel_module_type), C(nvml), C(gpus)
      (C(index), C(uuid), C(name)) and C(uuids).
    - C(cuda) detail has C(library), C(driver_version) (CUDA version of the driver), C(device_count) and C(devices)
      (C(index), C(name), C(compute_capability), C(elements), C(mismatches), C(error) as a CUresult name, C(call),
      C(seconds)).
    - C(toolkit) detail has C(runtime) and C(hook) (C(path), C(version)), C(cdi) (C(specs), C(devices),
      C(gpus_covered), C(gpus_missing), C(missing_device_nodes), C(missing_mounts), C(missing_hooks)) and, with
      O(containerd_config_dump_cmd), C(containerd) (C(found), C(runtimes), C(runtime_type), C(binary_name)).
    - C(device_plugin) detail has C(devices) (kubelet's healthy devices of O(resource_name)), C(device_ids),
      C(allocated), C(resources), C(kubelet_socket) and C(plugin_sockets).
  type: list
  elements: dict
  returned: always
msg:
  description: The summary, or on failure each failed check with its error and what to fix.
  type: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils import _validate
from ansible_collections.gpuops.nvidia.plugins.module_utils._files import path_problem


def argument_spec():
    return dict(
        checks=dict(type="list", elements="str", choices=list(_validate.CHECKS), default=list(_validate.CHECKS)),
        runtime_path=dict(type="path", default=_validate.DEFAULTS["runtime_path"]),
        hook_path=dict(type="path"),
        cdi_spec_dirs=dict(type="list", elements="path", default=list(_validate.DEFAULTS["cdi_spec_dirs"])),
        containerd_config_dump_cmd=dict(type="list", elements="str"),
        runtime_name=dict(type="str", default=_validate.DEFAULTS["runtime_name"]),
        kubelet_dir=dict(type="path", default=_validate.DEFAULTS["kubelet_dir"]),
        resource_name=dict(type="str", default=_validate.DEFAULTS["resource_name"]),
        cuda_elements=dict(type="int", default=_validate.DEFAULTS["cuda_elements"]),
        cuda_device=dict(type="str", default=_validate.DEFAULTS["cuda_device"]),
        command_timeout=dict(type="int", default=_validate.DEFAULTS["command_timeout"]),
        fail_on_error=dict(type="bool", default=True),
    )


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    p = module.params
    if not p["checks"]:
        module.fail_json(msg="checks must name at least one check (%s): an empty list validates nothing"
                             % ", ".join(_validate.CHECKS))
    if p["cuda_elements"] < 1:
        module.fail_json(msg="cuda_elements must be at least 1")
    if p["cuda_device"] != "all" and not (p["cuda_device"].isascii() and p["cuda_device"].isdigit()):
        module.fail_json(msg="cuda_device must be 'all' or a CUDA device ordinal, got %r" % p["cuda_device"])
    if p["command_timeout"] < 1:
        module.fail_json(msg="command_timeout must be at least 1 second, got %d" % p["command_timeout"])
    problems = [path_problem(p["runtime_path"], "runtime_path"), path_problem(p["kubelet_dir"], "kubelet_dir")]
    problems += [path_problem(d, "cdi_spec_dirs") for d in p["cdi_spec_dirs"] or []]
    if p["hook_path"] is not None:
        problems.append(path_problem(p["hook_path"], "hook_path"))
    if "toolkit" in p["checks"] and not p["cdi_spec_dirs"]:
        problems.append("cdi_spec_dirs must list at least one directory for the toolkit check")
    cmd = p["containerd_config_dump_cmd"]
    if cmd and any(not (w or "").strip() for w in cmd):
        problems.append("containerd_config_dump_cmd must be an argv list without empty words, got %r" % (cmd,))
    for option in ("runtime_name", "resource_name"):
        if not (p[option] or "").strip() or any(c.isspace() for c in p[option]):
            problems.append("%s must be a non-empty name without spaces, got %r" % (option, p[option]))
    problems = [x for x in problems if x]
    if problems:
        module.fail_json(msg="; ".join(problems))
    options = dict((k, p[k]) for k in _validate.DEFAULTS if k in p)
    result = _validate.validate(p["checks"], _validate.Context(options))
    if not result["ok"] and p["fail_on_error"]:
        module.fail_json(changed=False, **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
