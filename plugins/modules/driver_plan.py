#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: driver_plan
short_description: Plan the NVIDIA driver for a host and say whether the running driver already satisfies it
version_added: 0.1.0
description:
  - Reads the host (GPUs and their compute capability, NVSwitches, running kernel, loaded driver version and
    kernel module type, Secure Boot, installed packages, DKMS signing key enrolment, processes holding
    C(/dev/nvidia*)) and computes what the requested driver needs on this distribution -- packages and version
    pins, repository definition, package holds, kernel headers, DKMS or signed precompiled modules, the
    nouveau/nova_core blacklist, persistenced and fabric manager.
  - Reports RV(satisfied) (the loaded driver, or the installed packages when no driver is loaded, meet the
    request) and RV(changes) (what applying the request would change).
  - Never changes anything; the M(gpuops.nvidia.driver) role applies the plan. Use it directly to audit a
    node in check mode.
  - Fails early, with a remediation, when the request cannot work on the host (for example Secure Boot on,
    no signed module and no enrolled DKMS key; open modules on a pre-Turing GPU; Debian non-free without the
    requested branch).
author:
  - gpuops.nvidia contributors (@gpuops)
options:
  state:
    description: V(present) plans an install; V(absent) plans the removal and the lifting of holds.
    type: str
    choices: [present, absent]
    default: present
  branch:
    description:
      - Driver branch, for example V("580").
      - Required unless O(version) is set (its first field is then the branch).
    type: str
  version:
    description: Exact driver version to pin, for example V(580.95.05). Unset follows the newest of O(branch).
    type: str
  kernel_module_type:
    description:
      - V(open) or V(proprietary) kernel modules.
      - V(auto) picks open when every GPU is Turing (compute capability 7.5) or newer, proprietary otherwise;
        without GPU facts, open from branch 560 (NVIDIA's default since R560) and proprietary before.
    type: str
    choices: [auto, open, proprietary]
    default: auto
  source:
    description:
      - V(distro) uses the distribution's packages (Canonical's on Ubuntu, non-free on Debian).
      - V(cuda_repo) uses NVIDIA's CUDA repository (or a mirror of it, O(repo_url)).
      - V(auto) is V(cuda_repo) on RHEL-family hosts and V(distro) elsewhere.
    type: str
    choices: [auto, distro, cuda_repo]
    default: auto
  precompiled:
    description:
      - Use signed precompiled kernel modules when the source has them for the running kernel
        (Canonical's C(linux-modules-nvidia-*) on Ubuntu kernels). V(always) fails when there are none;
        V(never) always builds with DKMS.
    type: str
    choices: [auto, always, never]
    default: auto
  ubuntu_server:
    description: On Ubuntu, use Canonical's C(-server) (long-term, data-centre) driver packages.
    type: bool
    default: true
  headless:
    description:
      - Install the compute-only packages, without the X driver, Mesa and LLVM.
      - Ubuntu C(nvidia-headless[-no-dkms]-<branch>) instead of C(nvidia-driver-<branch>); Debian
        C(nvidia-kernel-dkms nvidia-smi libcuda1 nvidia-persistenced) instead of C(nvidia-driver).
    type: bool
    default: true
  fabricmanager:
    description: Install and run nvidia-fabricmanager. V(auto) does it when NVSwitches are present.
    type: str
    choices: [auto, always, never]
    default: auto
  persistenced:
    description: Enable nvidia-persistenced.
    type: bool
    default: true
  secure_boot_mok:
    description:
      - Under Secure Boot without signed precompiled modules, accept DKMS modules signed with the DKMS MOK key
        and plan its enrolment (a reboot with console confirmation in MokManager).
      - When false, such hosts fail early with the remediation.
    type: bool
    default: false
  repo_url:
    description: CUDA repository (or mirror) URL; default NVIDIA's for the distribution and architecture.
    type: str
  repo_key_url:
    description: URL of the CUDA repository signing key; default the key file in O(repo_url).
    type: str
  debian_mirror:
    description: Debian mirror that provides contrib, non-free and non-free-firmware.
    type: str
    default: http://deb.debian.org/debian
  debian_security_mirror:
    description: Debian security mirror.
    type: str
    default: http://deb.debian.org/debian-security
  root:
    description: Path prefix under which the host is read (a captured node root in tests).
    type: path
    default: /
  gpu_facts:
    description:
      - C(ansible_facts.gpu) from M(gpuops.nvidia.gpu_facts) (with the C(pci), C(kernel) and C(driver) subsets).
      - When omitted the module gathers them itself under O(root).
    type: dict
  arch:
    description: Machine architecture (C(ansible_facts.architecture)); default the target's.
    type: str
extends_documentation_fragment:
  - gpuops.nvidia.attributes
attributes:
  check_mode:
    support: full
    details: Only reads; runs the same in check mode.
  diff_mode:
    support: none
    details: Nothing is changed; RV(changes) lists what applying the plan would change.
  idempotent:
    support: full
notes:
  - Installed packages are read from C(/var/lib/dpkg/status) on Debian and Ubuntu and with C(rpm -qa) on
    RHEL-family hosts.
  - The DKMS key is found at C(/var/lib/dkms/mok.pub) (or Ubuntu's C(/var/lib/shim-signed/mok/MOK.der)); it is
    enrolled when its certificate is in the firmware's C(MokListRT).
seealso:
  - module: gpuops.nvidia.gpu_facts
  - name: NVIDIA open GPU kernel modules
    description: Which GPUs the open and proprietary modules support.
    link: https://github.com/NVIDIA/open-gpu-kernel-modules
"""

EXAMPLES = r"""
- name: Does the running driver satisfy branch 580?
  gpuops.nvidia.driver_plan:
    branch: "580"
  register: driver_plan_result

- name: Show what would change
  ansible.builtin.debug:
    var: driver_plan_result.changes
  when: not driver_plan_result.satisfied

- name: Plan an exact version from an internal mirror of the CUDA repository
  gpuops.nvidia.driver_plan:
    version: 580.95.05
    source: cuda_repo
    repo_url: https://mirror.example.com/cuda/ubuntu2404/x86_64/
    gpu_facts: "{{ ansible_facts.gpu }}"
"""

RETURN = r"""
satisfied:
  description: The loaded driver (or, with none loaded, the installed packages) meets the request.
  type: bool
  returned: always
  sample: true
changes:
  description: What applying the request would change, one sentence each; empty when satisfied.
  type: list
  elements: str
  returned: always
  sample: ["driver: replace loaded 580.159.04 (open) with 570 (open, dkms)"]
holders:
  description:
    - Processes holding C(/dev/nvidia*) open (C(pid), C(comm), C(devices)), which block unloading the module.
    - Read only when the loaded driver would be replaced or removed.
  type: list
  elements: dict
  returned: always
plan:
  description:
    - The plan. Keys include C(state), C(os_family), C(os_major), C(package_manager), C(source), C(branch),
      C(version), C(kernel_module_type) and C(kernel_module_type_reason), C(build) (dkms or precompiled),
      C(packages), C(package_specs) (with version pins), C(versioned_packages), C(headers), C(module_stream),
      C(holds_missing) (to hold now), C(holds_present) (held driver packages),
      C(fabricmanager_packages), C(repository) (C(kind), C(path), C(content), C(url), C(key_url), C(key_path),
      C(preferences); null when the distribution's sources suffice), C(holds) (installed packages to hold),
      C(unholds) and C(remove) (for V(absent)), C(blacklist) (C(path), C(content)), C(initramfs_command),
      C(services) (C(persistenced) and C(fabricmanager), each with C(name) and C(enabled)), C(secure_boot) (C(enabled),
      C(strategy), C(mok_key), C(mok_enrolled), C(instructions)), C(module_names), C(manage_packages) (false
      when a driver not installed from these packages already satisfies the request), C(installed)
      (C(loaded_version), C(loaded_type), C(packages)), C(reboot_reasons), C(notes), C(warnings),
      C(satisfied), C(changes).
  type: dict
  returned: success
remediation:
  description: What to do when the request cannot work on this host.
  type: str
  returned: failure
"""

import os
import platform

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils import _driver
from ansible_collections.gpuops.nvidia.plugins.module_utils._files import path_problem
from ansible_collections.gpuops.nvidia.plugins.module_utils._gpu_facts import gather


def argument_spec():
    return dict(
        state=dict(type="str", choices=["present", "absent"], default="present"),
        branch=dict(type="str"),
        version=dict(type="str"),
        kernel_module_type=dict(type="str", choices=["auto", "open", "proprietary"], default="auto"),
        source=dict(type="str", choices=["auto", "distro", "cuda_repo"], default="auto"),
        precompiled=dict(type="str", choices=["auto", "always", "never"], default="auto"),
        ubuntu_server=dict(type="bool", default=True),
        headless=dict(type="bool", default=True),
        fabricmanager=dict(type="str", choices=["auto", "always", "never"], default="auto"),
        persistenced=dict(type="bool", default=True),
        secure_boot_mok=dict(type="bool", default=False),
        repo_url=dict(type="str"),
        repo_key_url=dict(type="str", no_log=False),
        debian_mirror=dict(type="str", default=_driver.DEBIAN_MIRROR),
        debian_security_mirror=dict(type="str", default=_driver.DEBIAN_SECURITY_MIRROR),
        root=dict(type="path", default="/"),
        gpu_facts=dict(type="dict"),
        arch=dict(type="str"),
    )


def installed_packages(module, root, family):
    if family in ("debian", "ubuntu"):
        return _driver.read_dpkg_installed(root) or {}
    rpm = module.get_bin_path("rpm")
    if not rpm:
        return {}
    rc, out, err = module.run_command([rpm, "--root", root, "-qa", "--qf", "%{NAME}\t%{VERSION}\n"],
                                      environ_update={"LC_ALL": "C"})
    if rc != 0:
        module.warn("rpm -qa failed: %s" % err.strip())
        return {}
    return _driver.parse_installed(out, "dnf")


def request(params):
    fm = {"auto": "auto", "always": True, "never": False}[params["fabricmanager"]]
    keys = ("state", "branch", "version", "kernel_module_type", "source", "precompiled", "ubuntu_server", "headless",
            "persistenced", "secure_boot_mok", "repo_url", "repo_key_url", "debian_mirror", "debian_security_mirror")
    req = dict((k, params[k]) for k in keys)
    req["fabricmanager"] = fm
    return req


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True,
                           required_one_of=[("branch", "version")])
    params = module.params
    root = params["root"]
    problem = path_problem(root, "root")
    if problem:
        module.fail_json(msg=problem)
    if not os.path.isdir(root):
        module.fail_json(msg="root %s is not a directory" % root)
    gpu = params["gpu_facts"]
    if not gpu or "os" not in gpu or "driver" not in gpu:
        gpu, warnings = gather(root, ("pci", "kernel", "driver"))
        for warning in warnings:
            module.warn(warning)
    try:
        _driver.check_facts(gpu)
        _driver.check_request(dict(request(params), arch=params["arch"]))
    except _driver.PlanError as exc:
        module.fail_json(msg=str(exc), remediation=exc.remediation or "")
    family = _driver.os_family(gpu.get("os") or {})[0]
    held = _driver.read_dpkg_held(root) if family in ("debian", "ubuntu") else _driver.read_versionlock(root)
    host = _driver.host_from_facts(gpu, installed=installed_packages(module, root, family),
                                   mok=_driver.read_mok(root, family), held=held,
                                   arch=params["arch"] or platform.machine())
    try:
        result = _driver.plan(host, request(params))
    except _driver.PlanError as exc:
        module.fail_json(msg=str(exc), remediation=exc.remediation or "")
    holders = []
    if result["installed"]["loaded_version"] and (not result["satisfied"] or result["state"] == "absent"):
        holders = _driver.device_holders(root if os.path.isdir(os.path.join(root, "proc")) else "/")
        if holders:
            result["changes"].append("unloading the module is blocked by %s" % ", ".join(
                "%s (pid %d)" % (h["comm"], h["pid"]) for h in holders))
    module.exit_json(changed=False, satisfied=result["satisfied"], changes=result["changes"], holders=holders,
                     plan=result)


if __name__ == "__main__":
    main()
