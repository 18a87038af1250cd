#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: vgpu_devices
short_description: Create the vGPU devices of a vGPU host from a vGPU device manager config
version_added: 0.3.0
description:
  - "Makes each GPU of a vGPU host carry the vGPU devices its config asks for, the job of the GPU Operator's vGPU
    device manager, agentless. The config is the device manager's own format (C(version: v1),
    C(vgpu-configs: {NAME: [{devices: all, vgpu-devices: {A10-4Q: 6}}]})); the counts are per GPU; GPU indexes count
    the NVIDIA GPUs that are not virtual functions, in PCI address order."
  - "The GPU's interface is read from sysfs: NVIDIA's vendor-specific VFIO interface (vGPU 17 and later on Ada,
    Hopper and newer: per SR-IOV VF, C(nvidia/creatable_vgpu_types) lists C(<type id> : <name>) for the types the VF
    can take now, and writing a type ID to C(nvidia/current_vgpu_type) gives the VF that vGPU, 0 takes it away), or
    mediated devices (Ampere: on the VFs; older GPUs: on the GPU itself; C(mdev_supported_types/<type>/name),
    C(available_instances), C(create) with a UUID, C(<uuid>/remove))."
  - Type names are matched as vgpu-device-manager matches them (C(NVIDIA L40S-4Q) is C(L40S-4Q), C(GRID T4-1Q) is
    C(T4-1Q)) or whole.
  - Before any write, refuses a config that is not the device manager's format, an unknown type (the message lists
    what the GPU can create), more vGPUs than free VFs, more instances than the GPU says it can create (VFs that list
    the type, C(available_instances)), a GPU without a vGPU interface (driver not loaded, VFs not enabled), and taking
    away a vGPU that is in use; every message names the GPU (index, address, ID) and the type.
  - Idempotent per VF or mdev. vGPUs of a wanted type stay (the ones in use first); a vGPU of a type the config does
    not want, or beyond its count, is taken away only when it is not in use (held open by a process, or its VF on
    another driver; see M(gpuops.nvidia.sriov_vfs) for the in-use rule); new vGPUs go on free VFs that list the type.
  - A write the GPU refuses (its creatable lists shrink as vGPUs are made) undoes what the run did on that GPU.
  - "Type IDs seen in the GPUs' catalogs are cached in O(name_cache): a VF lists only what it can create now, so on a
    GPU whose VFs are all taken a type that is not there now can still be named."
author:
  - gpuops.nvidia contributors (@gpuops)
options:
  config:
    description:
      - "The vGPU device manager config (C(version: v1), C(vgpu-configs)). Required with O(state=present)."
    type: dict
  selected:
    description: The config of O(config) this host applies (the node label C(nvidia.com/vgpu.config) in a cluster).
    type: str
    default: default
  state:
    description:
      - V(present) makes the GPUs matched by the selected config carry exactly its vGPUs; V(absent) takes every vGPU
        of every NVIDIA GPU away (refused while one is in use).
    type: str
    choices: [present, absent]
    default: present
  name_cache:
    description:
      - File that keeps the vGPU type IDs and names seen on each GPU (this module's own, written whole).
      - A cache that cannot be read or parsed is rebuilt from the run's vGPU type catalogs, with a warning.
      - A symbolic link there is neither read nor written (a warning says so).
    type: path
    default: /var/lib/gpuops/vgpu-types.json
  root:
    description: Filesystem root where sysfs is read and written. For tests only.
    type: path
    default: /
extends_documentation_fragment:
  - gpuops.nvidia.attributes
attributes:
  check_mode:
    support: full
    details: Plans and refuses exactly as a real run and writes nothing.
  diff_mode:
    support: full
    details: Shows each GPU's vGPU types and counts before and after.
  idempotent:
    support: full
    details: GPUs that already carry the config's vGPUs report no change.
notes:
  - Requires root on the target and the NVIDIA vGPU host driver. Python standard library only.
  - vGPUs do not survive a reboot; the C(gpuops.nvidia.vgpu_host) role re-applies them at boot.
seealso:
  - module: gpuops.nvidia.sriov_vfs
"""

EXAMPLES = r"""
- name: Six A10-4Q vGPUs on every GPU
  gpuops.nvidia.vgpu_devices:
    config:
      version: v1
      vgpu-configs:
        default:
          - devices: all
            vgpu-devices: {A10-4Q: 6}

- name: The config the node's label selects
  gpuops.nvidia.vgpu_devices:
    config: "{{ gpuops_vgpu_device_manager_config }}"
    selected: "{{ gpuops_k8s_node_labels['nvidia.com/vgpu.config'] | default('default') }}"

- name: No vGPU anywhere (refused while a VM uses one)
  gpuops.nvidia.vgpu_devices:
    state: absent
"""

RETURN = r"""
gpus:
  description: Each GPU the run covered.
  returned: always
  type: list
  elements: dict
  sample:
    - index: 0
      bdf: "0000:41:00.0"
      pci_id: "10de:26b9"
      interface: vendor-vfio
      wanted: {L40S-4Q: 6}
      before: {L40S-8Q: 1}
      after: {L40S-4Q: 6}
      actions: [{vf: "0000:41:00.4", from: 1152, to: 0}, {vf: "0000:41:00.4", from: 0, to: 1150}]
notes:
  description: GPUs left alone (not matched by the selected config) and other things worth knowing.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils import _diff
from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import GpuopsError, fail
from ansible_collections.gpuops.nvidia.plugins.module_utils._files import (
    check_paths,
    ensure_file,
    ownership_problem,
    read_text,
    require_root,
    run_locks,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils._pci import host_path
from ansible_collections.gpuops.nvidia.plugins.module_utils._vgpu import (
    NAME_CACHE,
    VENDOR_VFIO,
    VgpuApplyError,
    after,
    apply_mdev,
    apply_vfio,
    changes,
    dump_cache,
    label,
    parse_cache,
    plan,
    update_cache,
)


def argument_spec():
    return dict(
        config=dict(type="dict"),
        selected=dict(type="str", default="default"),
        state=dict(type="str", choices=["present", "absent"], default="present"),
        name_cache=dict(type="path", default=NAME_CACHE),
        root=dict(type="path", default="/"),
    )


def _lines(gpu, counts):
    return "%s: %s\n" % (label(gpu), ", ".join("%s x%d" % kv for kv in sorted(counts.items())) or "no vGPU")


def run(module):
    p = module.params
    root = p["root"]
    check_paths(module, "name_cache")
    if p["state"] == "present" and p["config"] is None:
        module.fail_json(msg="config is required with state=present (the vGPU device manager's config: version: v1, "
                             "vgpu-configs: {NAME: [{devices: all, vgpu-devices: {TYPE: count}}]})")
    cache_path = host_path(root, p["name_cache"])
    with run_locks(module, [cache_path]):     # one run at a time per host: the cache's lock
        return _run_locked(module, root, cache_path)


def _run_locked(module, root, cache_path):
    p = module.params
    # the name cache is this module's own file: never read or written through a link; one that cannot be read or
    # parsed is rebuilt from this run's catalogs, with a warning
    keep_cache = True
    link = ownership_problem(cache_path, True)
    if link:
        module.warn("the vGPU type cache is not used: %s" % link)
        cache, problem, keep_cache = {}, None, False
    else:
        try:
            cache, problem = parse_cache(read_text(cache_path))
        except (OSError, UnicodeDecodeError) as exc:
            cache, problem = {}, "cannot be read (%s)" % exc
    if problem:
        module.warn("the vGPU type cache %s %s: it is rebuilt from this run's vGPU type catalogs" % (cache_path, problem))
    try:
        pl = plan(root, p["config"], p["selected"], p["state"], cache)
    except GpuopsError as exc:
        fail(module, exc)
    changed, out = False, []
    for gp in pl["gpus"]:
        gpu = gp["gpu"]
        entry = {"index": gpu["index"], "bdf": gpu["bdf"], "pci_id": gpu["pci_id"], "interface": gp["interface"],
                 "wanted": gp["wanted"], "before": gp["before"], "actions": []}
        if changes(gp):
            if module.check_mode:
                entry["actions"] = gp["drop"] + [{"create": k, "count": n} for k, n in sorted(gp["missing"].items())
                                                 if n > 0]
                entry["after"] = dict(gp["wanted"])
            else:
                try:
                    entry["actions"] = apply_vfio(root, gp) if gp["interface"] == VENDOR_VFIO else apply_mdev(root, gp)
                except VgpuApplyError as exc:
                    fail(module, exc, msg=str(exc) + ("; earlier GPUs were changed" if changed else ""),
                         changed=changed or exc.changed, gpus=out)
                entry["after"] = after(root, gp)
            changed = True
        else:
            entry["after"] = dict(gp["before"])
        out.append(entry)
    if not module.check_mode and keep_cache:
        new, cache_changed = update_cache(cache, pl["gpus"])
        if cache_changed or problem:
            try:
                ensure_file(module, cache_path, dump_cache(new), mode=0o644, owned=True)
            except OSError as exc:
                module.warn("cannot write the vGPU type cache %s: %s" % (cache_path, exc))
    diff = None
    if module._diff:
        gpus = {g["gpu"]["bdf"]: g["gpu"] for g in pl["gpus"]}
        diff = _diff.entry("vGPUs", "".join(_lines(gpus[e["bdf"]], e["before"]) for e in out),
                           "".join(_lines(gpus[e["bdf"]], e["after"]) for e in out))
    _diff.exit_json(module, dict(changed=changed, gpus=out, notes=pl["notes"]), diff)


def main():
    run(require_root(AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True), "vgpu_devices"))


if __name__ == "__main__":
    main()
