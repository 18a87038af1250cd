#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: container_runtime
short_description: Register the NVIDIA runtime in containerd, CRI-O or Docker without clobbering the config
version_added: 0.1.0
description:
  - Adds (or updates) the NVIDIA container runtime in the configuration of containerd
    (config version 1 and 2 for containerd 1.x, 3 and 4 for containerd 2.x), CRI-O (a drop-in file) or Docker (C(daemon.json)).
  - Only the keys this module manages are touched; every other key, table and comment of
    the file is kept byte for byte (TOML is edited in place by a small comment-preserving
    editor shipped in the collection, so targets need no third-party Python library).
  - "containerd: the new runtime inherits the options of the default runtime (so
    C(SystemdCgroup) is kept), gets C(runtime_type = io.containerd.runc.v2) and
    C(options.BinaryName). Keys already set on the NVIDIA runtime win over inherited ones."
  - Before a restart the candidate config is validated with C(containerd --config <candidate> config dump)
    (and C(dockerd --validate) for Docker) when the binary is present.
  - The daemon is restarted only when the parsed configuration changed (comment-only edits do
    not restart it). If the daemon does not come back healthy (for containerd this includes
    the CRI plugin failing to load), the original files are restored, the daemon is restarted
    again and the task fails with the daemon's own error.
  - k3s/RKE2 regenerate C(/var/lib/rancher/*/agent/etc/containerd/config.toml) at every start;
    the module refuses to edit it (k3s/RKE2 add the C(nvidia) runtime themselves when
    C(nvidia-container-runtime) is installed; a plain-TOML C(config.toml.tmpl) can be edited).
author:
  - gpuops.nvidia contributors (@gpuops)
extends_documentation_fragment:
  - gpuops.nvidia.attributes
attributes:
  check_mode:
    support: full
    details: >-
      Computes and validates the edit (validation writes temporary candidates next to the
      config and removes them); the config is not changed and no daemon is restarted.
  diff_mode:
    support: full
    details: One diff per file (main config and drop-in).
  idempotent:
    support: full
options:
  runtime:
    description: Container runtime whose configuration is edited.
    type: str
    required: true
    choices: [containerd, crio, docker]
  config_path:
    description:
      - File to edit.
      - Defaults to C(/etc/containerd/config.toml), C(/etc/crio/crio.conf.d/99-nvidia.toml)
        or C(/etc/docker/daemon.json) depending on O(runtime).
    type: path
  drop_in_path:
    description:
      - containerd only. Put the NVIDIA settings into this file (owned by the module) and add
        it to the main file's C(imports); unset edits the main file.
      - Because containerd before 2.1 replaces whole plugin tables from imports instead of merging
        them, the drop-in carries a copy of the main file's whole CRI plugin section plus the
        NVIDIA runtime. Re-run the module after editing that section of the main file.
      - Needs config version 2 or 3.
    type: path
  runtime_name:
    description: Name of the runtime entry.
    type: str
    default: nvidia
  runtime_path:
    description: Absolute path of the runtime binary (C(BinaryName), C(runtime_path) or C(path)).
    type: path
    default: /usr/bin/nvidia-container-runtime
  runtime_options:
    description: containerd only. Extra keys for the runtime's C(options) table (for example C(SystemdCgroup)).
    type: dict
    default: {}
  runtime_config:
    description:
      - Extra keys for the runtime entry itself (containerd runtime table, CRI-O runtime table,
        Docker C(runtimes.<name>) object), for example C(privileged_without_host_devices).
    type: dict
    default: {}
  set_as_default:
    description:
      - Make the runtime the default one (containerd C(default_runtime_name), CRI-O
        C(default_runtime), Docker C(default-runtime)).
      - When false and the runtime is currently the default, the default goes back to
        C(runc) (containerd) or the setting is removed (CRI-O drop-in, Docker).
    type: bool
    default: false
  enable_cdi:
    description:
      - Turn on CDI (containerd C(enable_cdi), Docker C(features.cdi)). CRI-O always has CDI on.
      - When false the setting is left as it is.
    type: bool
    default: false
  restart_mode:
    description:
      - How to restart the daemon after an effective change.
      - C(systemd) runs C(systemctl restart) O(service_name); C(signal) sends SIGHUP to the running
        daemon (containerd exits on it and its supervisor restarts it, like the GPU Operator's
        signal mode; dockerd and CRI-O reload their configuration on it); C(command) runs
        O(restart_command); C(none) does not restart.
    type: str
    choices: [systemd, signal, command, none]
    default: systemd
  service_name:
    description: systemd unit for O(restart_mode=systemd). Defaults to the runtime's usual unit.
    type: str
  restart_command:
    description: Command (argv list) for O(restart_mode=command); it must restart the daemon.
    type: list
    elements: str
  pid_file:
    description: For O(restart_mode=signal), a file holding the daemon's pid (else C(pidof) is used).
    type: path
  socket:
    description: Daemon socket used for the health check after a restart.
    type: path
  binary_path:
    description: Daemon binary used for validation (C(containerd), C(dockerd)); looked up on PATH by default.
    type: path
  ctr_path:
    description: C(ctr) binary used to check that containerd's CRI plugin loaded; looked up on PATH by default.
    type: path
  validate:
    description: Validate the candidate configuration with the daemon binary before writing it.
    type: bool
    default: true
  restart_timeout:
    description: Seconds to wait for the daemon to come back.
    type: int
    default: 30
  backup:
    description: Keep a timestamped copy of each file before changing it.
    type: bool
    default: false
notes:
  - Supports Python 3.8+ on the target with the standard library only.
seealso:
  - module: gpuops.nvidia.cdi_spec
"""

EXAMPLES = r"""
- name: Register the NVIDIA runtime in containerd, keep everything else
  gpuops.nvidia.container_runtime:
    runtime: containerd
    enable_cdi: true
    backup: true

- name: Same, through a drop-in, and make it the default runtime
  gpuops.nvidia.container_runtime:
    runtime: containerd
    drop_in_path: /etc/containerd/conf.d/99-nvidia.toml
    set_as_default: true

- name: CRI-O drop-in
  gpuops.nvidia.container_runtime:
    runtime: crio

- name: Docker daemon.json with CDI
  gpuops.nvidia.container_runtime:
    runtime: docker
    enable_cdi: true

- name: A containerd that is not run by systemd
  gpuops.nvidia.container_runtime:
    runtime: containerd
    config_path: /opt/ctd/config.toml
    socket: /opt/ctd/containerd.sock
    restart_mode: command
    restart_command: [/opt/ctd/restart.sh]
"""

RETURN = r"""
config_path:
  description: The main file that was checked.
  returned: success
  type: str
  sample: /etc/containerd/config.toml
drop_in_path:
  description: The containerd drop-in file, when O(drop_in_path) is used.
  returned: when O(drop_in_path) is set
  type: str
config_version:
  description: containerd config version detected (1, 2 or 3).
  returned: when O(runtime=containerd)
  type: int
  sample: 2
cri_plugin:
  description: containerd CRI plugin table that holds the runtimes.
  returned: when O(runtime=containerd)
  type: str
  sample: io.containerd.grpc.v1.cri
inherited_from:
  description: containerd runtime whose settings the NVIDIA runtime inherited, if any.
  returned: when O(runtime=containerd)
  type: str
  sample: runc
changed_files:
  description: Files whose content changed (or would change in check mode).
  returned: always
  type: list
  elements: str
backup_files:
  description: Backups taken, by file.
  returned: when O(backup=true) and a file changed
  type: dict
effective_changed:
  description: Whether the parsed configuration changed (only then is the daemon restarted).
  returned: success
  type: bool
restarted:
  description: Whether the daemon was restarted.
  returned: success
  type: bool
validated:
  description: Whether the candidate configuration was validated by the daemon binary.
  returned: success
  type: bool
effective_runtime:
  description: The NVIDIA runtime as C(containerd config dump) shows it after validation.
  returned: when containerd validation ran
  type: dict
restored:
  description: On a failed restart, whether the original files were put back and the daemon came back.
  returned: failure after a restart
  type: bool
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils._container_runtime import (
    DEFAULT_BINARY,
    Daemon,
    RuntimeConfigError,
    dump_has_runtime,
    plan,
    validate_containerd,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils._files import ensure_file, read_text, remove_file


def argument_spec():
    return dict(
        runtime=dict(type="str", required=True, choices=["containerd", "crio", "docker"]),
        config_path=dict(type="path"),
        drop_in_path=dict(type="path"),
        runtime_name=dict(type="str", default="nvidia"),
        runtime_path=dict(type="path", default="/usr/bin/nvidia-container-runtime"),
        runtime_options=dict(type="dict", default={}),
        runtime_config=dict(type="dict", default={}),
        set_as_default=dict(type="bool", default=False),
        enable_cdi=dict(type="bool", default=False),
        restart_mode=dict(type="str", default="systemd", choices=["systemd", "signal", "command", "none"]),
        service_name=dict(type="str"),
        restart_command=dict(type="list", elements="str"),
        pid_file=dict(type="path"),
        socket=dict(type="path"),
        binary_path=dict(type="path"),
        ctr_path=dict(type="path"),
        validate=dict(type="bool", default=True),
        restart_timeout=dict(type="int", default=30),
        backup=dict(type="bool", default=False),
    )


def _write_all(module, changes, backup):
    results = []
    for path, _before, after in changes:
        results.append(ensure_file(module, path, after, backup=backup))
    return results


def _restore(module, changes):
    for path, before, _after in changes:
        if before is None:
            if os.path.exists(path):
                remove_file(module, path)
        else:
            ensure_file(module, path, before)


def run(module):
    p = dict(module.params)
    result = dict(changed=False, restarted=False, validated=False, changed_files=[])
    try:
        changes, info = plan(p, read_text)
    except RuntimeConfigError as e:
        module.fail_json(msg=str(e), **result)
    result.update(info)
    result["config_path"] = changes[0][0]
    changes = [c for c in changes if c[1] != c[2]]
    result["changed_files"] = [c[0] for c in changes]
    result["changed"] = bool(changes)

    binary = p.get("binary_path") or module.get_bin_path(DEFAULT_BINARY[p["runtime"]])
    if changes and p["validate"] and binary:
        try:
            if p["runtime"] == "containerd":
                cands = _with_unchanged(result["config_path"], p["drop_in_path"], changes) if p.get("drop_in_path") else changes
                dump = validate_containerd(module, binary, cands, p)
                rt = dump_has_runtime(dump, p)
                if rt is None:
                    raise RuntimeConfigError("containerd config dump does not show runtime %r after the change "
                                             "(is the drop-in imported?)" % p["runtime_name"])
                result["effective_runtime"] = rt
                result["validated"] = True
            elif p["runtime"] == "docker":
                result["validated"] = _validate_docker(module, binary, changes[0])
        except RuntimeConfigError as e:
            module.fail_json(msg=str(e), **result)
    elif changes and p["validate"] and p["runtime"] != "crio":
        module.warn("%s not found; the new configuration was not validated by the daemon" % DEFAULT_BINARY[p["runtime"]])
    if not os.path.exists(p["runtime_path"]):
        module.warn("runtime_path %s does not exist on this host yet" % p["runtime_path"])

    if module._diff:
        result["diff"] = [dict(before=b or "", after=a, before_header=path, after_header=path) for path, b, a in changes]
    if not changes or module.check_mode:
        return result

    writes = _write_all(module, changes, p["backup"])
    backups = dict((w["path"], w["backup_file"]) for w in writes if w.get("backup_file"))
    if backups:
        result["backup_files"] = backups
    if not result.get("effective_changed") or p["restart_mode"] == "none":
        return result
    if p["restart_mode"] == "command" and not p.get("restart_command"):
        _restore(module, changes)
        module.fail_json(msg="restart_mode=command needs restart_command; original files restored", **result)
    daemon = Daemon(module, p)
    ok, err = daemon.restart()
    result["restarted"] = True
    if ok:
        return result
    _restore(module, changes)
    back, err2 = daemon.restart()
    result["restored"] = back
    module.fail_json(
        msg="%s did not come back healthy with the new configuration: %s. Original configuration restored; "
            "daemon %s." % (p["runtime"], err, "is running again" if back else "is STILL DOWN: " + err2),
        **result)


def _with_unchanged(main, drop, changes):
    """Validation needs main + drop-in even when only one of them changed."""
    have = dict((c[0], c) for c in changes)
    out = []
    for path in (main, drop):
        if path in have:
            out.append(have[path])
        else:
            text = read_text(path)
            out.append((path, text, text or ""))
    return out


def _validate_docker(module, binary, change):
    import tempfile
    path, _before, after = change
    fd, tmp = tempfile.mkstemp(prefix=".gpuops-validate-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(after)
        rc, out, err = module.run_command([binary, "--validate", "--config-file", tmp])
        if "unknown flag: --validate" in (err + out):
            module.warn("%s cannot validate configs (needs Docker 23+); %s was not validated" % (binary, path))
            return False
        if rc != 0:
            raise RuntimeConfigError("dockerd rejects the new %s: %s" % (path, (err or out).strip()))
        return True
    finally:
        os.unlink(tmp)


def main():
    module = AnsibleModule(
        argument_spec=argument_spec(),
        supports_check_mode=True,
        required_if=[("restart_mode", "command", ("restart_command",))],
    )
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
