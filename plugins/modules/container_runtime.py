#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: container_runtime
short_description: Register (or remove) the NVIDIA runtime in containerd, CRI-O or Docker without clobbering the config
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
    not restart it). A marker in O(state_dir) is written before the first file changes and removed only
    once the daemon came back healthy, so a run stopped in between (killed, rebooted) has the next run
    restart the daemon even though the files already match. If the daemon does not come back healthy (for containerd this includes
    the CRI plugin failing to load), the original files are restored, the daemon is restarted
    again and the task fails with the daemon's own error.
  - k3s/RKE2 regenerate C(/var/lib/rancher/*/agent/etc/containerd/config.toml) at every start;
    the module refuses to edit it (k3s/RKE2 add the C(nvidia) runtime themselves when
    C(nvidia-container-runtime) is installed; a plain-TOML C(config.toml.tmpl) can be edited).
  - "Uninstall: the first time O(state=present) changes a file (main config, containerd drop-in,
    CRI-O drop-in, C(daemon.json)) the module keeps the file's original bytes, mode and owner in a
    record under O(state_dir), together with the sha256 of what it wrote (updated on every later write)."
  - "O(state=absent) puts the original bytes back (or deletes the file if it did not exist) when the
    file still holds exactly what the module last wrote, so an untouched containerd config ends
    byte-identical to what it was before the first run. If the file was changed since, only the
    module's own entries are taken out with the comment-preserving editor (the runtime table,
    C(default_runtime_name)/C(default_runtime)/C(default-runtime) when it names the runtime, the
    drop-in's C(imports) entry), everything else is kept (C(enable_cdi) and C(features.cdi) too:
    other CDI users may rely on them), and a warning says that byte-identity could not be kept.
    A file changed by someone else between two of the module's writes counts as edited.
    The containerd drop-in the module wrote is deleted; so is a CRI-O drop-in or C(daemon.json)
    the module created, when nothing else is left in it. Without a record (a
    config written before records existed) the entries are removed the same surgical way."
  - O(state=absent) validates and restarts the daemon exactly like O(state=present), and puts the
    files back if the daemon does not come back healthy.
  - "Safe writes: every file is written atomically (temp file in C(.gpuops-tmp/) next to the file's directory,
    on the same file system, fsync, rename; never a temp file inside a directory the daemon loads). With
    O(drop_in_path) the drop-in is written before the main file that imports it (O(state=absent) takes the
    import out before deleting the drop-in), so containerd never imports a missing drop-in. If any write or
    the restart fails, every file is put back byte for byte (mode and owner too; a drop-in that did not
    exist is deleted), the records under O(state_dir) are put back, and the task fails saying so."
  - "A symlinked config is edited through the link: the link's target is replaced atomically and the link
    stays. An existing file keeps its mode and owner; a new file gets mode 0644."
  - "Concurrent runs on one host: the whole read-modify-write (and the restart) holds an exclusive lock per
    file (C(flock) on C(/run/lock/gpuops/<sha256 of the real path>.lock), shared with the collection's
    other modules), so two runs at once cannot lose each other's change; the second waits for the first."
author:
  - gpuops.nvidia contributors (@gpuops)
extends_documentation_fragment:
  - gpuops.nvidia.attributes
attributes:
  check_mode:
    support: full
    details: >-
      Computes and validates the edit (validation writes temporary candidates under
      O(state_dir)/tmp or the system temp directory and removes them); the config and the records under O(state_dir) are not
      changed and no daemon is restarted. Same for O(state=absent).
  diff_mode:
    support: full
    details: One diff per file (main config and drop-in), also for O(state=absent).
  idempotent:
    support: full
options:
  runtime:
    description: Container runtime whose configuration is edited.
    type: str
    required: true
    choices: [containerd, crio, docker]
  state:
    description:
      - C(present) adds or updates the runtime.
      - C(absent) uninstalls it (see the description); O(runtime_path), O(runtime_options),
        O(runtime_config), O(set_as_default) and O(enable_cdi) are ignored then.
    type: str
    choices: [present, absent]
    default: present
  state_dir:
    description:
      - Directory holding one record per config file the module changed (the file's original
        content and the sha256 of what the module wrote), named by the sha256 of the file's real
        path. O(state=absent) uses and then removes it.
      - Must be kept between the O(state=present) and O(state=absent) runs, and be the same for both.
    type: path
    default: /var/lib/gpuops/container_runtime
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
      - Needs config version 2, 3 or 4 (a version 1 config is refused).
      - With O(state=absent) it may be left out when the drop-in was written with O(state_dir)
        records (the record of the main file names it).
      - Must not be O(config_path) itself; that is refused before anything changes, also when the two
        paths reach the same file through symlinks, C(..), a relative form (resolved from the working
        directory and, like containerd does for imports, from the main file's directory) or a hard link.
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
    description:
      - For O(restart_mode=signal), a file holding the daemon's pid (else C(pidof) is used).
      - Its content must be one process ID in ASCII digits; anything else (V(-1), a FIFO, a huge file) fails the
        restart naming the file, and no signal is sent.
    type: path
  socket:
    description: Daemon socket used for the health check after a restart.
    type: path
  binary_path:
    description:
      - Daemon binary used for validation (C(containerd), C(dockerd), C(crio)); looked up on PATH by default.
      - "For CRI-O it also reads the restarted daemon's running configuration (C(crio status config)): CRI-O starts
        and serves without a runtime whose O(runtime_path) is missing, so the restart fails (and the files are
        restored) unless the runtime is in it, at O(runtime_path), and the default when O(set_as_default=true)."
    type: path
  crio_config:
    description:
      - CRI-O's main configuration file, merged with the drop-in directory of O(config_path) when the candidate is
        validated with C(crio --config <crio_config> --config-dir <candidate directory> config). Skipped when absent.
    type: path
    default: /etc/crio/crio.conf
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
    description:
      - Keep a timestamped copy of each file before changing it, in O(backup_dir) (never next to the
        file, because CRI-O loads every file of C(crio.conf.d) and a containerd C(imports) glob may cover the
        drop-in's directory, so a backup there would be loaded as configuration).
    type: bool
    default: false
  backup_dir:
    description:
      - Directory for the backups of O(backup=true). Each backup is C(<backup_dir>/<real path of the
        file>.<pid>.<time>~) (directories created with mode 0700).
      - Defaults to C(<state_dir>/backups).
      - Refused when it is the directory of an edited file, or inside the directory of a drop-in (CRI-O
        O(config_path), containerd O(drop_in_path)).
    type: path
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

- name: Uninstall from containerd (original file back byte for byte when it was not edited since)
  gpuops.nvidia.container_runtime:
    runtime: containerd
    state: absent

- name: Uninstall the drop-in set-up (drop-in deleted, its imports entry removed)
  gpuops.nvidia.container_runtime:
    runtime: containerd
    state: absent
    drop_in_path: /etc/containerd/conf.d/99-nvidia.toml

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
  returned: when O(drop_in_path) is set (or, with O(state=absent), found in the main file's record)
  type: str
config_version:
  description: containerd config version detected (1, 2, 3 or 4).
  returned: when O(runtime=containerd) and O(state=present)
  type: int
  sample: 2
cri_plugin:
  description: containerd CRI plugin table that holds the runtimes.
  returned: when O(runtime=containerd) and O(state=present)
  type: str
  sample: io.containerd.grpc.v1.cri
inherited_from:
  description: containerd runtime whose settings the NVIDIA runtime inherited, if any.
  returned: when O(runtime=containerd) and O(state=present)
  type: str
  sample: runc
changed_files:
  description:
    - Files whose content changed (or would change in check mode).
    - After a failed write or restart, the files that could not be put back (empty when all were).
  returned: always
  type: list
  elements: str
backup_files:
  description: Backups taken, by file (paths under RV(backup_dir)).
  returned: when O(backup=true) and a file changed
  type: dict
  sample: {"/etc/crio/crio.conf.d/99-nvidia.toml": "/var/lib/gpuops/container_runtime/backups/etc/crio/crio.conf.d/99-nvidia.toml.4242.2026-01-31@12:00:00~"}
backup_dir:
  description: Directory the backups went to.
  returned: when O(backup=true)
  type: str
  sample: /var/lib/gpuops/container_runtime/backups
effective_changed:
  description: Whether the parsed configuration changed (only then is the daemon restarted).
  returned: success
  type: bool
restarted:
  description: Whether the daemon was restarted.
  returned: success
  type: bool
restart_pending:
  description:
    - True when an earlier run changed the files but was stopped before the daemon came back healthy on them
      (its restart marker C(<state_dir>/<sha256 of the config's real path>.restart-pending) was found); the
      daemon is then restarted although nothing changes, and this is false again once it came back.
  returned: when such a marker was found
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
  description:
    - On a failed write, whether every file was put back byte for byte (C(changed) is then false).
    - On a failed restart, whether the original files were put back and the daemon came back
      (C(changed) is then true, because the daemon was restarted).
  returned: failure after a write or a restart
  type: bool
restored_files:
  description: Files put back byte for byte as they were before the module's first change.
  returned: when O(state=absent)
  type: list
  elements: str
removed_files:
  description: Files deleted (the containerd drop-in; files that did not exist before the module's first change).
  returned: when O(state=absent)
  type: list
  elements: str
edited_files:
  description: Files from which only the runtime's entries were removed, because they changed since the module wrote them (or no record was kept).
  returned: when O(state=absent)
  type: list
  elements: str
"""

import contextlib
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils import _diff
from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import GpuopsError, fail
from ansible_collections.gpuops.nvidia.plugins.module_utils._container_runtime import (
    DEFAULT_BINARY,
    DEFAULT_STATE_DIR,
    RuntimeApplyError,
    Daemon,
    FileChange,
    RecordStore,
    RuntimeConfigError,
    apply_changes,
    check_backup_dir,
    check_params,
    default_backup_dir,
    dump_has_runtime,
    plan,
    plan_absent,
    present_records,
    read_bytes,
    restore_changes,
    validate_containerd,
    validate_crio,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils._files import file_locks, read_text


def argument_spec():
    return dict(
        runtime=dict(type="str", required=True, choices=["containerd", "crio", "docker"]),
        state=dict(type="str", default="present", choices=["present", "absent"]),
        state_dir=dict(type="path", default=DEFAULT_STATE_DIR),
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
        crio_config=dict(type="path", default="/etc/crio/crio.conf"),
        ctr_path=dict(type="path"),
        validate=dict(type="bool", default=True),
        restart_timeout=dict(type="int", default=30),
        backup=dict(type="bool", default=False),
        backup_dir=dict(type="path"),
    )


def run(module):
    """Refuse bad input first, then do the whole read-modify-write under the files' locks."""
    p = dict(module.params)
    result = dict(changed=False, restarted=False, validated=False, changed_files=[])
    try:
        config_path = check_params(p, need_runtime_path=p.get("state") != "absent")
        paths = [config_path, p.get("drop_in_path")]
        if p["runtime"] == "containerd" and p.get("state") == "absent" and not p.get("drop_in_path"):
            # the drop-in of an earlier run is named by the main file's record
            paths.append((RecordStore(p["state_dir"]).load(config_path) or {}).get("drop_in_path"))
        if p.get("backup"):
            p["backup_dir"] = p.get("backup_dir") or default_backup_dir(p)
            check_backup_dir(p["backup_dir"], p, paths)
    except GpuopsError as e:
        fail(module, e, **result)
    locks = contextlib.ExitStack()
    try:
        locks.enter_context(file_locks(paths, enabled=not module.check_mode))
    except OSError as e:
        module.fail_json(msg="cannot lock %s: %s" % (" and ".join(x for x in paths if x), e), **result)
    with locks:
        if p.get("state") == "absent":
            return run_absent(module, p)
        return run_present(module, p, result)


def run_present(module, p, result):
    try:
        changes, info = plan(p, read_text)
        store = RecordStore(p["state_dir"])
    except GpuopsError as e:
        fail(module, e, **result)
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
            else:
                merged = validate_crio(module, binary, changes[0], p)
                rt = _crio_runtime(merged, p)
                if rt is None:
                    where = os.path.dirname(result["config_path"])
                    raise RuntimeConfigError("`crio config` does not show runtime %r after the change (does another "
                                             "drop-in of %s remove it?)" % (p["runtime_name"], where))
                result["effective_runtime"] = rt
                result["validated"] = True
        except GpuopsError as e:
            result.update(changed=False, changed_files=[])      # refused: nothing was written
            fail(module, e, **result)
    elif changes and p["validate"]:
        module.warn("%s not found; the new configuration was not validated by the daemon" % DEFAULT_BINARY[p["runtime"]])
    if not os.path.exists(p["runtime_path"]):
        module.warn("runtime_path %s does not exist on this host yet" % p["runtime_path"])

    if module._diff:
        result["diff"] = _diff.entries([_diff.entry(path, b, a) for path, b, a in changes])
    if not changes:
        return _pending_restart(module, p, result, store)
    if module.check_mode:
        return result

    files = [FileChange(path, read_bytes(path), after.encode("utf-8")) for path, _before, after in changes]
    # the drop-in first, then the main file that imports it: never an import of a missing
    # or stale drop-in (state=absent goes the other way: the import goes before the drop-in)
    files.sort(key=lambda c: c.path == result["config_path"])
    try:
        records = present_records(store, p, files, result["config_path"])
    except GpuopsError as e:
        fail(module, e, **result)
    # the pristine copies are safe on disk before the first byte of a config changes
    saved = [(path, store.load_raw(path)) for path, _rec in records]

    def undo_records():
        for path, raw in saved:
            store.put_raw(path, raw)
    try:
        for path, rec in records:
            store.save(path, rec)
    except (OSError, IOError) as e:
        undo_records()
        result.update(changed=False, changed_files=[])
        module.fail_json(msg="cannot write the state record for %s in %s: %s; nothing was changed"
                             % (path, p["state_dir"], e), **result)
    return _apply(module, p, result, files, store, undo_records=undo_records)


def run_absent(module, p):
    result = dict(changed=False, restarted=False, validated=False, changed_files=[],
                  restored_files=[], removed_files=[], edited_files=[])
    try:
        store = RecordStore(p["state_dir"])
        files, records, info, warnings = plan_absent(p, store)
    except GpuopsError as e:
        fail(module, e, **result)
    result.update(info)
    result["changed_files"] = [c.path for c in files]
    result["changed"] = bool(files or records)
    for w in warnings:
        module.warn(w)

    binary = p.get("binary_path") or module.get_bin_path(DEFAULT_BINARY[p["runtime"]])
    if files and p["validate"] and binary:
        try:
            if p["runtime"] == "containerd":
                main = result["config_path"]
                after = [c for c in files if c.path == main]
                text = (after[0].after_text if after else read_text(main)) or ""
                validate_containerd(module, binary, [(main, None, text)], p)
                result["validated"] = True
            elif p["runtime"] == "docker" and files[0].after is not None:
                result["validated"] = _validate_docker(module, binary, (files[0].path, None, files[0].after_text))
            elif p["runtime"] == "crio":
                # a removed drop-in validates as an empty one: the rest of the directory must still load
                validate_crio(module, binary, (files[0].path, None, files[0].after_text or ""), p)
                result["validated"] = True
        except GpuopsError as e:
            result.update(changed=False, changed_files=[])      # refused: nothing was written
            fail(module, e, **result)
    elif files and p["validate"] and any(c.after is not None for c in files):
        module.warn("%s not found; the new configuration was not validated by the daemon" % DEFAULT_BINARY[p["runtime"]])

    if module._diff:
        result["diff"] = _diff.entries([c.diff() for c in files])
    if not files:
        _pending_restart(module, p, result, store)
    if module.check_mode:
        return result
    if files:
        _apply(module, p, result, files, store)
    # records go only once the files are back (a failed restart above keeps them)
    for path, rec in records:
        if rec is None:
            store.remove(path)
        else:
            store.save(path, rec)
    return result


def _pending_restart(module, p, result, store):
    """Nothing to change: restart the daemon anyway when an earlier run changed the files and was stopped
    (killed, or its restart failed) before the daemon came back healthy on them (its restart marker is
    still in state_dir)."""
    if p["restart_mode"] == "none" or not store.restart_pending(result["config_path"]):
        return result
    result["changed"] = True
    result["restart_pending"] = True
    if module.check_mode:
        return result
    daemon = Daemon(module, p)
    ok, err = daemon.restart()
    result["restarted"] = True
    if not ok:
        module.fail_json(msg="%s: the restart an earlier run left pending (the configuration on disk is the new one) "
                             "failed: %s; it is retried on the next run (pending while %s exists)"
                             % (p["runtime"], err, store.restart_marker(result["config_path"])), **result)
    try:
        store.clear_restart(result["config_path"])
    except OSError as e:
        module.warn("cannot remove %s: %s; the next run restarts the daemon again" % (
            store.restart_marker(result["config_path"]), e))
    result["restart_pending"] = False
    return result


def _apply(module, p, result, files, store, undo_records=None):
    """Write ``files`` (in order), restart when the parsed config changed, restore on failure.

    Any failure (a write, the restart) puts every file back byte for byte (a file
    that did not exist is deleted) and the state records as they were, then fails
    with a message; ``changed`` then says whether anything is left different
    (a file that could not be restored, or a daemon that was restarted).

    A restart marker goes into state_dir before the first write of a change that needs a restart and is
    removed once the daemon came back healthy (or back on the restored files): a run killed in between
    leaves it, and the next run restarts the daemon even though the files already match.
    """
    config = result["config_path"]
    was_pending = p["restart_mode"] != "none" and store.restart_pending(config)
    restart = p["restart_mode"] != "none" and (result.get("effective_changed") or was_pending)

    def clear_marker():
        try:
            store.clear_restart(config)
        except OSError as e:
            module.warn("cannot remove %s: %s; the next run restarts the daemon again"
                        % (store.restart_marker(config), e))

    def undo():
        unrestored = restore_changes(module, files)
        if undo_records:
            undo_records()
        result["changed_files"] = unrestored
        return unrestored

    if restart and p["restart_mode"] == "command" and not p.get("restart_command"):
        if undo_records:
            undo_records()
        result.update(changed=False, changed_files=[])
        module.fail_json(msg="restart_mode=command needs restart_command; nothing was changed", **result)
    if restart and not was_pending:
        try:
            store.mark_restart(config, p["runtime"])
        except (OSError, IOError) as e:
            if undo_records:
                undo_records()
            result.update(changed=False, changed_files=[])
            module.fail_json(msg="%s: cannot write the restart marker %s: %s; nothing was changed"
                                 % (p["runtime"], store.restart_marker(config), e), **result)
    if p["backup"]:
        result["backup_dir"] = p["backup_dir"]
    try:
        backups = apply_changes(module, files, p["backup"], p.get("backup_dir"))
    except RuntimeApplyError as e:
        if undo_records:
            undo_records()
        if restart and not was_pending and not e.unrestored:
            clear_marker()
        result.update(changed=bool(e.unrestored), changed_files=e.unrestored, restored=not e.unrestored)
        fail(module, e, msg="%s: %s" % (p["runtime"], e), **result)
    if backups:
        result["backup_files"] = backups
    if not restart:
        return result
    daemon = Daemon(module, p)
    ok, err = daemon.restart()
    result["restarted"] = True
    if ok:
        clear_marker()
        return result
    unrestored = undo()
    daemon.expect_runtime = False       # back on the restored files: up is enough
    back, err2 = daemon.restart()
    if back and not unrestored:
        clear_marker()          # the daemon runs on the files as they are on disk again
    result["restored"] = back and not unrestored
    result["changed"] = True        # the daemon was restarted (and files may be left changed)
    module.fail_json(
        msg="%s did not come back healthy with the new configuration: %s. %s; daemon %s."
            % (p["runtime"], err,
               "Original configuration restored" if not unrestored else "Could NOT restore " + ", ".join(unrestored),
               "is running again" if back else "is STILL DOWN: " + err2),
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


def _crio_runtime(merged, p):
    node = merged
    for part in ("crio", "runtime", "runtimes", p["runtime_name"]):
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


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
