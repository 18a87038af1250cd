#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: cdi_spec
short_description: Generate the CDI spec for the NVIDIA GPUs of a host
version_added: 0.1.0
description:
  - Writes a Container Device Interface spec (C(kind nvidia.com/gpu)) describing the host's GPUs,
    like C(nvidia-ctk cdi generate) does, without needing the toolkit binaries.
  - Devices are named by index (C(0), C(1)), UUID and C(all); a GPU in MIG mode is exposed through its
    MIG devices (C(<gpu>:<mig>) and C(MIG-...) UUIDs).
  - Container edits carry the control device nodes, the driver libraries (C(lib*.so.<driver version>)
    next to C(libcuda)), the utility binaries, firmware and IPC sockets found on the host, and the
    C(nvidia-cdi-hook) hooks when that binary (or C(nvidia-ctk)) exists.
  - The spec declares the lowest C(cdiVersion) that can express it.
  - GPU UUIDs and MIG devices come from NVML (C(pynvml)) when it is importable, otherwise from
    C(/proc/driver/nvidia) (MIG devices are then named by index only).
  - Device names follow CDI's rules (ASCII letters and digits, with underscores, dots, colons and dashes between
    them). A UUID the node reports that breaks them, or that repeats another device's name, is left out with a
    warning (the device keeps its index name and C(all)), since a container runtime refuses the whole spec for
    one bad name. MIG capability directories not named C(gi<number>)/C(ci<number>) are skipped with a warning.
  - Node files are read only when they are regular files, without blocking and up to 64 KiB each. A FIFO,
    socket, device or directory, or a larger file, is a warning (or, for a GPU's C(information) file, a failure
    before anything is written), never a hang.
  - The file is written only when its content differs (or only its mode is changed when only the mode
    differs), atomically, under a per-file lock shared with the collection's other modules.
  - The spec is written whole. A symbolic link at O(path), or a file there that is not a CDI spec of kind
    C(nvidia.com/gpu) (this module's, or one C(nvidia-ctk cdi generate) wrote), is neither replaced nor removed;
    the module fails with a message and changes nothing.
  - With O(root) other than C(/) the module works on the node tree under it, as the collection's other modules
    with a O(root) option do (M(gpuops.nvidia.gpu_facts), M(gpuops.nvidia.vfio_pci), M(gpuops.nvidia.sriov_vfs));
    the host is read there and the spec is written (or removed) there, at O(root)/O(path).
author:
  - gpuops.nvidia contributors (@gpuops)
extends_documentation_fragment:
  - gpuops.nvidia.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  idempotent:
    support: full
    details: The output is deterministic for a given host state.
options:
  path:
    description:
      - Where to write the spec, as the host sees it (under O(root) when O(root) is not C(/)). C(.json) writes
        JSON, anything else YAML.
      - Use C(/etc/cdi) for a static spec or C(/var/run/cdi) for one regenerated at boot.
    type: path
    default: /etc/cdi/nvidia.yaml
  state:
    description:
      - C(present) writes the spec.
      - C(absent) removes the file at O(path) and nothing else (no other spec, no directory);
        nothing is read from the host then. Check and diff mode work as for C(present).
    type: str
    choices: [present, absent]
    default: present
  root:
    description:
      - Path prefix under which the host is read (C(/dev), C(/proc/driver/nvidia), C(/sys/module), O(library_dirs),
        O(bin_dirs), O(hook_path), firmware) and the spec at O(path) is written or removed -- a node tree captured
        elsewhere, a test fixture, or the host's C(/) mounted into a container. Paths in the spec are written
        without this prefix.
      - NVML always talks to the running driver, not to a tree, so with O(root) other than C(/) GPUs are read
        from C(/proc) (O(source=auto)) and O(source=nvml) is refused.
      - Before 0.3.0 the spec was written at O(path) itself, outside O(root).
    type: path
    default: /
  source:
    description:
      - Where GPUs are enumerated from. C(auto) uses NVML when C(pynvml) imports and O(root) is C(/), else
        C(/proc).
    type: str
    choices: [auto, nvml, proc]
    default: auto
  device_name_strategy:
    description: Device names to generate.
    type: list
    elements: str
    choices: [index, uuid]
    default: [index, uuid]
  all_device:
    description: Also generate the C(all) device.
    type: bool
    default: true
  library_dirs:
    description: Directories searched (in order) for C(libcuda.so.<driver version>).
    type: list
    elements: path
  bin_dirs:
    description: Directories searched for C(nvidia-smi) and the other utility binaries.
    type: list
    elements: path
  hook_path:
    description: C(nvidia-cdi-hook) (or C(nvidia-ctk)) used for hooks. Found automatically when unset.
    type: path
  mode:
    description:
      - File mode of the spec, as an octal string (C('0644')) or a number.
      - Enforced on every run, also when the content is already right (a mode-only change reports
        C(changed) and shows the old and new mode in the diff headers). The owner of an existing file is kept.
      - When O(path) is a symlink, the link's target is written (atomically) and gets the mode; the link stays.
    type: raw
    default: '0644'
  backup:
    description:
      - Keep a timestamped copy of the previous spec, next to it (its name ends with C(~) and not with
        C(.yaml)/C(.json), so CDI registries do not load it).
    type: bool
    default: false
notes:
  - Supports Python 3.8+ on the target with the standard library only; C(pynvml) is optional.
seealso:
  - module: gpuops.nvidia.container_runtime
"""

EXAMPLES = r"""
- name: Static CDI spec for the GPUs of this host
  gpuops.nvidia.cdi_spec:
    path: /etc/cdi/nvidia.yaml

- name: Spec as JSON, UUID names only
  gpuops.nvidia.cdi_spec:
    path: /var/run/cdi/nvidia.json
    device_name_strategy: [uuid]

- name: Uninstall the spec (only the file at path is removed)
  gpuops.nvidia.cdi_spec:
    path: /etc/cdi/nvidia.yaml
    state: absent
"""

RETURN = r"""
path:
  description: The spec file written or removed (O(path) under O(root) when O(root) is not C(/)).
  returned: always
  type: str
  sample: /etc/cdi/nvidia.yaml
cdi_version:
  description: cdiVersion written into the spec.
  returned: when O(state=present)
  type: str
  sample: 0.5.0
devices:
  description: Device names in the spec.
  returned: when O(state=present)
  type: list
  elements: str
  sample: ["0", "GPU-0b231366-65a0-0fb7-6602-4823e36b7ca8", "all"]
driver_version:
  description: NVIDIA driver version found.
  returned: when O(state=present)
  type: str
  sample: 580.159.04
library_dir:
  description: Directory holding the driver libraries mounted into containers.
  returned: when O(state=present)
  type: str
  sample: /usr/lib/x86_64-linux-gnu
hook:
  description: Hook binary used, or null when the spec has no hooks.
  returned: when O(state=present)
  type: str
source:
  description: Where GPUs were enumerated from (C(nvml) or C(proc)).
  returned: when O(state=present)
  type: str
spec:
  description: The generated spec.
  returned: when O(state=present)
  type: dict
mode:
  description: Mode of the spec file, as enforced.
  returned: when O(state=present)
  type: str
  sample: '0644'
backup_file:
  description: Backup of the previous spec (also before O(state=absent) removes it).
  returned: when O(backup=true) and the spec changed
  type: str
"""

import os
import re
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.nvidia.plugins.module_utils import _diff
from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import GpuopsError, fail
from ansible_collections.gpuops.nvidia.plugins.module_utils._cdi import build_spec, gpus_from_nvml, render
from ansible_collections.gpuops.nvidia.plugins.module_utils._files import (
    ensure_file,
    on_host,
    path_problem,
    remove_file,
    target_problem,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils._pci import host_path

try:
    import pynvml
    HAS_PYNVML = True
    PYNVML_ERR = None
except ImportError:
    pynvml = None
    HAS_PYNVML = False
    PYNVML_ERR = traceback.format_exc()


def argument_spec():
    return dict(
        path=dict(type="path", default="/etc/cdi/nvidia.yaml"),
        state=dict(type="str", default="present", choices=["present", "absent"]),
        root=dict(type="path", default="/"),
        source=dict(type="str", default="auto", choices=["auto", "nvml", "proc"]),
        device_name_strategy=dict(type="list", elements="str", choices=["index", "uuid"], default=["index", "uuid"]),
        all_device=dict(type="bool", default=True),
        library_dirs=dict(type="list", elements="path"),
        bin_dirs=dict(type="list", elements="path"),
        hook_path=dict(type="path"),
        mode=dict(type="raw", default="0644"),
        backup=dict(type="bool", default=False),
    )


def _mode(module):
    m = module.params["mode"]
    try:
        if isinstance(m, bool):
            raise ValueError(m)
        value = int(m, 8) if isinstance(m, str) else int(m)
    except (TypeError, ValueError):
        value = None
    if value is None or not 0 <= value <= 0o7777:
        module.fail_json(msg="mode must be an octal string between '0000' and '07777' such as '0644' "
                             "(or the equivalent number), got %r" % (m,))
    return value


def check_params(module):
    """Refuse bad paths before anything is read or written."""
    p = module.params
    problems = [path_problem(p["path"], "path"), path_problem(p["root"], "root")]
    problems += [path_problem(d, "library_dirs") for d in p["library_dirs"] or []]
    problems += [path_problem(d, "bin_dirs") for d in p["bin_dirs"] or []]
    if p["hook_path"] is not None:
        problems.append(path_problem(p["hook_path"], "hook_path"))
    problems = [x for x in problems if x]
    if problems:
        module.fail_json(msg="; ".join(problems))
    if not os.path.isdir(p["root"]):
        module.fail_json(msg="root %s is not a directory (the node tree the host is read and the spec written "
                             "under); nothing was changed" % p["root"])
    if p["state"] == "present" and p["source"] == "nvml" and not on_host(p["root"]):
        module.fail_json(msg="source=nvml reads the running driver through NVML, not the node tree under root %s: "
                             "use source=proc (or auto) with a root, or root=/ for NVML; nothing was changed"
                             % p["root"])
    if p["state"] == "present" and p["hook_path"] is not None:
        hook = host_path(p["root"], p["hook_path"])
        if not os.path.isfile(hook):
            module.fail_json(msg="hook_path %s does not exist%s: every container created with this spec would fail "
                                 "to start; install nvidia-container-toolkit or leave hook_path out"
                                 % (p["hook_path"], "" if on_host(p["root"]) else " under root %s" % p["root"]))
    problem = target_problem(spec_file(p))
    if problem:
        module.fail_json(msg="%s; path must name the spec file; nothing was changed" % problem)


def spec_file(params):
    """The file the spec is written to (or removed from): ``path`` under ``root``."""
    return host_path(params["root"], params["path"])


def _is_nvidia_gpu_spec(text):
    """a CDI spec of kind nvidia.com/gpu"""
    # the spec at path is written whole: replaced (or removed) only when it is one of ours, or nvidia-ctk's that this
    # module replaces -- never through a symbolic link, never over another file (see _files.ownership_problem)
    return any(re.fullmatch(r'[ \t]*"?kind"?[ \t]*:[ \t]*"?nvidia\.com/gpu"?[ \t]*,?[ \t]*', line)
               for line in text.splitlines())


def _write(module, fn, *args, **kwargs):
    try:
        return fn(module, *args, owned=_is_nvidia_gpu_spec, **kwargs)
    except OSError as e:
        module.fail_json(msg="cannot write %s: %s" % (spec_file(module.params), e))


def run(module):
    p = module.params
    check_params(module)
    if p["state"] == "absent":
        return _write(module, remove_file, spec_file(p), backup=p["backup"])
    if not p["device_name_strategy"] and not p["all_device"]:
        module.fail_json(msg="device_name_strategy is empty and all_device is false: the spec would have no device")
    mode = _mode(module)
    source = p["source"]
    if source == "nvml" and not HAS_PYNVML:
        module.fail_json(msg=missing_required_lib("pynvml (nvidia-ml-py)"), exception=PYNVML_ERR)
    gpus = None
    used = "proc"
    nvml_warnings = []
    if source in ("auto", "nvml") and HAS_PYNVML and on_host(p["root"]):
        try:
            gpus = gpus_from_nvml(pynvml, p["root"], nvml_warnings)
            used = "nvml"
        except Exception as e:  # NVML present but unusable (no driver, no GPU)
            if source == "nvml":
                module.fail_json(msg="NVML failed: %s" % e)
            gpus = None
    try:
        spec, info = build_spec(root=p["root"], gpus=gpus, naming=tuple(p["device_name_strategy"]),
                                library_dirs=p["library_dirs"], bin_dirs=p["bin_dirs"],
                                hook_path=p["hook_path"], all_device=p["all_device"])
    except GpuopsError as e:
        fail(module, e)
    for w in nvml_warnings + info["warnings"]:
        module.warn(w)
    result = _write(module, ensure_file, spec_file(p), render(spec, p["path"]), mode=mode, backup=p["backup"],
                    enforce_mode=True)
    result.update(mode="%04o" % mode, cdi_version=spec["cdiVersion"], devices=info["device_names"], driver_version=info["driver_version"],
                  library_dir=info["library_dir"], hook=info["hook"], source=used, spec=spec)
    return result


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    result = run(module)
    if module._diff:
        result["diff"] = _diff.entries(result.get("diff"))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
