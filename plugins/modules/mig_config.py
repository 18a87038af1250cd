#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: mig_config
short_description: Apply a MIG layout (mig-parted's v1 config format) to a host's GPUs through NVML
version_added: 0.3.0
description:
  - Takes a config in NVIDIA mig-parted's v1 format (C(version), C(mig-configs); entries with C(devices),
    C(mig-enabled), C(mig-devices) and an optional C(device-filter)), so existing files work unchanged, and
    applies the config named O(name) to the GPUs of the host, agentlessly, through NVML (C(pynvml)).
  - Every GPU is read and every layout is checked against that GPU's own profile table before the first
    change; a refused layout changes nothing on any GPU. Refused with a message naming the GPU and the profile
    are an unknown profile, a count that is not a positive integer, more instances of a profile or more slices
    than the GPU has, a layout whose slices add up but that has no valid placement, enabling MIG on a GPU
    without MIG, GPU indexes the host does not have and a GPU matched by two entries.
  - Enables or disables MIG mode per GPU. When the mode change needs a GPU reset, O(reset=gpu) resets that
    GPU only (C(nvidia-smi --gpu-reset -i <bus id>)); when the reset is impossible (the GPU in use, for example
    by nvidia-persistenced or nvidia_drm) or O(reset=never), the GPU is reported in RV(reset_pending) and its
    instances are not created -- all GPUs are never reset.
  - Keeps the GPU and compute instances that already match, destroys only the ones that differ, creates the
    rest in placements found by search (the profiles' start positions are fixed, so order matters), and reads
    the GPU back to check the result.
  - GPUs not matched by any entry of the config, and GPUs without MIG under C(devices=all), are left alone.
  - MIG instances do not survive a reboot; the M(gpuops.nvidia.mig_layout) role installs a systemd unit that
    re-applies the layout at boot, after the driver and before the container runtime and kubelet.
author:
  - gpuops.nvidia contributors (@gpuops)
requirements:
  - C(pynvml) from NVIDIA's C(nvidia-ml-py) (with NVML's MIG calls) for the Python that runs the module, and the NVIDIA
    driver, on the target. Without it the module fails before any change with a message saying how to install it
    (C(<python> -m pip install nvidia-ml-py), or the distribution's C(python3-pynvml) where it is recent enough);
    the M(gpuops.nvidia.mig_layout) role can install it (C(mig_layout_nvml_install)).
options:
  config:
    description:
      - The whole mig-parted v1 config (C(version=v1), C(mig-configs)), as a mapping.
      - Load a file on the controller with C(lookup('file', path) | from_yaml).
    type: dict
    required: true
  name:
    description: The config to apply, a key of C(mig-configs) (what the C(nvidia.com/mig.config) label selects).
    type: str
    required: true
  reset:
    description:
      - V(gpu) resets only the GPU whose MIG mode change is pending a reset.
      - V(never) does not reset; the GPU is listed in RV(reset_pending) for a later reset or reboot.
    type: str
    choices: [gpu, never]
    default: gpu
extends_documentation_fragment:
  - gpuops.nvidia.attributes
attributes:
  check_mode:
    support: full
    details: Plans with the GPUs' real NVML answers and makes no NVML write call.
  diff_mode:
    support: full
    details: Before and after, one line per GPU (MIG mode and instances with their placements).
  idempotent:
    support: full
notes:
  - Profile names are mig-parted's (C(1g.18gb), C(1g.18gb+me), C(1c.2g.35gb) for a one-slice compute instance in
    a two-slice GPU instance); each MIG device is its own GPU instance with one compute instance.
  - Stop the GPU's clients (device plugin, DCGM, workloads) before changing a layout; destroying an instance in
    use fails with the driver's "In use" error and nothing after it is attempted.
seealso:
  - module: gpuops.nvidia.gpu_facts
"""

EXAMPLES = r"""
- name: Two small and two big instances on every H200 (mig-parted's all-balanced)
  gpuops.nvidia.mig_config:
    config: "{{ lookup('ansible.builtin.file', 'files/mig-config.yaml') | from_yaml }}"
    name: all-balanced

- name: Plan only, with the real GPUs' answers
  gpuops.nvidia.mig_config:
    config: "{{ gpuops_mig_configs }}"
    name: "{{ gpuops_mig_config }}"
  check_mode: true
  diff: true
  register: mig_plan
"""

RETURN = r"""
changed:
  description: Whether MIG mode or instances changed (would change, in check mode).
  type: bool
  returned: always
config:
  description: The config applied.
  type: str
  returned: success
  sample: all-balanced
gpus:
  description:
    - One entry per GPU of the host - C(index), C(uuid), C(name), C(bdf), C(mig_capable), C(managed) (an entry
      of the config matched it), C(mig_mode_before) (C(current), C(pending)), C(set_mig_mode) (the mode set, or
      null), C(keep), C(destroy) and C(create) (instances as C(<profile>@<placement start>)), C(changed), and
      after applying C(mig_mode_after), C(verified), C(found), C(expected), C(reset_pending), C(reset_output).
    - C(profiles) lists the GPU-instance profiles the GPU offers, read from NVML (C(name), C(id), C(slices),
      C(instances), C(memory_mib), C(placements) as C([start, size]) pairs, C(name_nvml) as NVML reports it when it
      does and C(name_computed) from the profile's memory).
  type: list
  elements: dict
  returned: success
reset_pending:
  description: Indexes of the GPUs whose MIG mode change waits for a GPU reset or a reboot.
  type: list
  elements: int
  returned: success
  sample: []
notes:
  description: GPUs left alone and why.
  type: list
  elements: str
  returned: success
errors:
  description: Every problem found when the layout was refused.
  type: list
  elements: str
  returned: failure
"""

import sys

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils import _diff
from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import GpuopsError, VerifyError, fail
from ansible_collections.gpuops.nvidia.plugins.module_utils import _mig


def load_nvml():
    """(pynvml, None), or (None, why); unit tests replace this with the NVML simulator."""
    return _mig.load_pynvml()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            config=dict(type="dict", required=True),
            name=dict(type="str", required=True),
            reset=dict(type="str", choices=["gpu", "never"], default="gpu"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        names = _mig.validate_config(params["config"])
    except GpuopsError as exc:
        fail(module, exc, msg="MIG config refused: %s" % exc)
    if params["name"] not in names:
        module.fail_json(msg="MIG config %r is not in the config (it has: %s)" % (params["name"], ", ".join(names)),
                         errors=["unknown config %r" % params["name"]])
    lib, why = load_nvml()
    problem = _mig.nvml_problem(lib, why, sys.executable)
    if problem:
        module.fail_json(msg="cannot apply MIG layouts, nothing changed: %s" % problem,
                         errors=[problem], remediation=_mig.nvml_install_hint(sys.executable))

    def reset(gpu):
        smi = module.get_bin_path("nvidia-smi", opt_dirs=["/usr/local/nvidia/bin"])
        if smi is None:
            return "nvidia-smi not found: GPU %s left pending a reset" % gpu["bdf"]
        rc, out, err = module.run_command([smi, "--gpu-reset", "-i", gpu["bdf"]])
        return ("rc=%d %s %s" % (rc, out, err)).strip()

    try:
        result = _mig.run(lib, params["config"], params["name"], check_mode=module.check_mode,
                          reset=reset if params["reset"] == "gpu" else None)
    except VerifyError as exc:
        fail(module, exc, msg="MIG config %r applied, but the GPUs do not hold it: %s" % (params["name"], exc))
    except GpuopsError as exc:
        fail(module, exc, msg="MIG layout refused, nothing changed: %s" % exc)
    except lib.NVMLError as exc:
        module.fail_json(msg="NVML error while applying MIG config %r: %s" % (params["name"], exc))
    diff = result.pop("diff")
    if module._diff:
        result["diff"] = _diff.entries(_diff.entry("MIG layout", diff["before"], diff["after"]))
    if result["reset_pending"]:
        module.warn("MIG mode change pending a GPU reset or reboot on GPU %s; instances not created there"
                    % ", ".join(map(str, result["reset_pending"])))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
