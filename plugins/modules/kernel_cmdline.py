#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: kernel_cmdline
short_description: Ensure kernel command-line arguments are present or absent in the boot loader configuration
version_added: 0.1.0
description:
  - Adds or removes kernel arguments such as V(intel_iommu=on), V(iommu=pt) or V(vfio-pci.ids=10de:2335)
    idempotently, for the next boot.
  - Debian/Ubuntu GRUB gets a drop-in under C(/etc/default/grub.d/) owned by this module, then C(update-grub)
    (or C(grub-mkconfig)); C(/etc/default/grub) itself is never rewritten.
  - RHEL-family hosts with BLS entries use C(grubby --update-kernel=ALL).
  - systemd-boot hosts get C(/etc/kernel/cmdline) edited, then C(kernel-install add) for the running kernel.
    When that file does not exist it is created from the running command line (without C(BOOT_IMAGE=) and
    C(initrd=)) only when an argument must change; a run that changes nothing (removing an argument that is not
    set, adding one the running kernel already has) creates nothing and runs nothing.
  - Arguments after a bare C(--) (in C(/proc/cmdline), C(/etc/kernel/cmdline) or the GRUB configuration) go to
    init, not to the kernel. They never count as kernel arguments (not in RV(configured) or RV(running), never
    removed or matched), and C(/etc/kernel/cmdline) keeps them verbatim after C(--), after the kernel arguments.
    The GRUB drop-in can only append, so with a bare C(--) in the GRUB command line, O(state=present) is refused.
  - Returns RV(reboot_required) by comparing the requested state with the running C(/proc/cmdline).
author:
  - gpuops.nvidia contributors (@gpuops)
options:
  args:
    description:
      - Kernel arguments, V(key) or V(key=value). With O(state=present) an existing value of the same key is replaced.
      - With O(state=absent) a bare V(key) removes the key with any value; V(key=value) removes only that value.
      - >-
        Kernel parameter syntax, checked before anything changes: the key is letters, digits and the characters
        C(_), C(-) and C(.); an unquoted value holds letters, digits and the characters C(_ . , : / = + @ ! % ~ ^ # -);
        a value with spaces, or with any of the characters C(; & | < > [ ] { } * ?) or parentheses, is
        double-quoted as a whole, for example V(dyndbg="file a.c +p"). Dollar signs, backticks, backslashes,
        single quotes, control characters, non-ASCII characters and a bare C(--) are refused: the shell that
        sources the GRUB drop-in and GRUB's own parser would interpret them, and the kernel has no escapes.
      - Required (at least one argument) except with O(owner) and O(state=absent), where an empty list removes
        every argument the owner's record holds.
    type: list
    elements: str
    default: []
  state:
    description: Whether the arguments must be present or absent.
    type: str
    choices: [present, absent]
    default: present
  bootloader:
    description: Boot loader backend; V(auto) detects it.
    type: str
    choices: [auto, grub, grubby, systemd-boot]
    default: auto
  update_bootloader:
    description:
      - Regenerate the boot loader configuration after a change (C(update-grub), C(grub-mkconfig), C(kernel-install)).
      - A regeneration that fails is retried on every later run, and the module reports a change, until it
        succeeds, also when the file already holds the arguments. The marker
        C(/var/lib/gpuops/kernel_cmdline.regenerate-pending) is written before the file changes and removed
        only after the tool succeeded.
    type: bool
    default: true
  backup:
    description: Keep a timestamped copy of a file before changing it.
    type: bool
    default: false
  owner:
    description:
      - Name under which the arguments this module adds are recorded, so that O(state=absent) later removes
        those and only those (a role's uninstall). 1-64 letters, digits, V(_), V(.) and V(-).
      - With O(state=present) an argument the configured command line (the next boot's) did not already hold,
        as the effective value of its key, is added and recorded in C(<record_dir>/<owner>.json), together with
        the value of the same key it replaced, if any. The record is written before the boot loader
        configuration changes, so a run killed in between never leaves an added argument unrecorded.
      - An argument that was already configured before the owner asked for it (the user's own
        V(intel_iommu=on) in C(/etc/default/grub), or one another call of this module added without an
        owner) is not recorded and stays on O(state=absent); it is returned in RV(kept). One that another
        owner's record holds is shared; it is removed only when no owner's record holds it any more.
      - With O(state=absent) only recorded arguments that O(args) names (a bare V(key) names every value of
        the key; an empty O(args) names all of them) are removed, then forgotten. A value of the same key that
        an added argument replaced comes back where the boot loader backend had replaced it (C(grubby),
        systemd-boot; the GRUB backend never edits C(/etc/default/grub), so its value is in force again by
        itself). The record file is removed when it holds nothing.
      - Arguments added before the owner's record existed (by an earlier version of this collection) are in no
        record and stay; remove them with O(state=absent) without O(owner).
      - Without O(owner) nothing is recorded and O(state=absent) removes what O(args) names (the GRUB backend
        refuses arguments set outside its drop-in).
    type: str
    version_added: 0.3.0
  record_dir:
    description:
      - Directory of the owners' records (one C(<owner>.json) each); removed when its last record goes.
      - Roles of this collection pass C(<gpuops_state_dir>/kernel_cmdline).
    type: path
    default: /var/lib/gpuops/kernel_cmdline
    version_added: 0.3.0
extends_documentation_fragment:
  - gpuops.nvidia.attributes
attributes:
  check_mode:
    support: full
    details: Computes the new configuration and RV(reboot_required) without writing or running any tool that changes state.
  diff_mode:
    support: full
    details: >-
      Shows the drop-in or C(/etc/kernel/cmdline) change, or the configured command line for grubby; with
      O(owner), also the change of the owner's record.
  idempotent:
    support: full
    details: A second run with the same arguments reports no change.
notes:
  - Requires root on the target. Python standard library only.
  - The GRUB drop-in appends the arguments to C(GRUB_CMDLINE_LINUX_DEFAULT) as one single-quoted shell word, so
    the shell that sources it never expands or runs anything in it. A drop-in written by an earlier version
    (double-quoted) is read and rewritten once. A drop-in edited by hand to hold a malformed argument is refused.
  - Arguments with quoted values are compared with C(/proc/cmdline) as the kernel parses them
    (V(key="a b") and V("key=a b") are the same parameter).
  - The GRUB drop-in and the owners' records are this module's own files, written whole. A symbolic link at their
    path, or a drop-in there without the module's C(# Managed by gpuops.nvidia.kernel_cmdline) header, is refused
    before anything changes. C(/etc/kernel/cmdline) is the user's file (edited, not written whole), so it is
    edited through a symbolic link the user made, like the container runtimes' configs.
  - The GRUB backend refuses to remove an argument that is set outside its drop-in (it says which file to edit).
    An argument whose key has another value in C(/etc/default/grub) (say V(intel_iommu=off)) is overridden;
    the drop-in's value comes later on the command line, and the kernel honours the last occurrence.
seealso:
  - module: gpuops.nvidia.vfio_pci
"""

EXAMPLES = r"""
- name: Turn the IOMMU on for VM passthrough
  gpuops.nvidia.kernel_cmdline:
    args: [intel_iommu=on, iommu=pt]
  register: cmdline

- name: Remove the arguments again
  gpuops.nvidia.kernel_cmdline:
    args: [intel_iommu, iommu=pt]
    state: absent

- name: Add the arguments on behalf of a role, remembering which ones were not there before
  gpuops.nvidia.kernel_cmdline:
    args: [intel_iommu=on, iommu=pt]
    owner: vfio

- name: Uninstall -- remove only what the role added (a user's own intel_iommu=on stays)
  gpuops.nvidia.kernel_cmdline:
    args: [intel_iommu=on, iommu=pt]
    state: absent
    owner: vfio
  register: cmdline_removed
"""

RETURN = r"""
bootloader:
  description: Backend used.
  returned: always
  type: str
  sample: grub
configured:
  description: The kernel arguments configured for the next boot (after the change; init's, after C(--), left out).
  returned: success
  type: list
  elements: str
  sample: ["console=ttyS0,115200", "intel_iommu=on", "iommu=pt"]
running:
  description: Arguments of the running kernel (C(/proc/cmdline) up to a bare C(--); what follows went to init).
  returned: success
  type: list
  elements: str
unmet:
  description: Requested arguments the running kernel does not honour yet.
  returned: success
  type: list
  elements: str
  sample: ["intel_iommu=on"]
reboot_required:
  description:
    - True when the running kernel's command line does not satisfy the request.
    - With O(owner) and O(state=absent), true while the running kernel honours one of the named (or removed)
      arguments that the next boot's configuration no longer gives it; arguments in RV(kept) never count.
  returned: success
  type: bool
record:
  description: The owner's record file (it may not exist).
  returned: when O(owner) is set
  type: str
  sample: /var/lib/gpuops/kernel_cmdline/vfio.json
recorded:
  description: Arguments the owner's record holds after this run (what O(state=absent) would remove).
  returned: when O(owner) is set
  type: list
  elements: str
  sample: ["intel_iommu=on", "iommu=pt"]
kept:
  description: Requested arguments left to their earlier owner because this owner did not add them (already
    configured before, with O(state=present); not in the record, with O(state=absent)).
  returned: when O(owner) is set
  type: list
  elements: str
  sample: ["intel_iommu=on"]
removed:
  description: Arguments taken off the configured command line in this run (O(state=absent) with O(owner)).
  returned: when O(owner) is set
  type: list
  elements: str
  sample: ["iommu=pt"]
path:
  description: File that holds the managed arguments (GRUB drop-in or /etc/kernel/cmdline).
  returned: when the backend uses a file
  type: str
regenerated:
  description: Whether the boot loader configuration was regenerated in this run (after a change, or to retry
    a regeneration that failed in an earlier run).
  returned: always
  type: bool
backup_file:
  description: Backup taken when O(backup=true) and the file changed.
  returned: when a backup was taken
  type: str
"""

import glob
import os
import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils import _diff
from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import GpuopsError, fail
from ansible_collections.gpuops.nvidia.plugins.module_utils._files import (
    _nolock,
    clear_pending,
    ensure_file,
    file_lock,
    mark_pending,
    path_problem,
    read_text,
    remove_file,
    target_problem,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils._kernel_cmdline import (
    GRUB_DROPIN,
    HEADER,
    OWNER_RE,
    RECORD_DIR,
    REGEN_PENDING,
    SYSTEMD_BOOT_CMDLINE,
    apply_args,
    canonical,
    detect_bootloader,
    join_cmdline,
    kernel_args,
    kernel_part,
    overridden,
    parse_grub_dropin,
    parse_record,
    plan_cmdline_file,
    plan_grub,
    plan_owned,
    reboot_pending_absent,
    record_path,
    render_record,
    split_cmdline,
    unmet,
    validate_args,
)

PROC_CMDLINE = "/proc/cmdline"

GRUB_BASE_SCRIPT = r"""
[ -f /etc/default/grub ] && . /etc/default/grub
for f in /etc/default/grub.d/*.cfg; do
  [ "$f" = "$1" ] && continue
  [ -e "$f" ] && . "$f"
done
printf '%s %s' "$GRUB_CMDLINE_LINUX" "$GRUB_CMDLINE_LINUX_DEFAULT"
"""


def argument_spec():
    return dict(
        args=dict(type="list", elements="str", default=[]),
        state=dict(type="str", choices=["present", "absent"], default="present"),
        bootloader=dict(type="str", choices=["auto", "grub", "grubby", "systemd-boot"], default="auto"),
        update_bootloader=dict(type="bool", default=True),
        backup=dict(type="bool", default=False),
        owner=dict(type="str"),
        record_dir=dict(type="path", default=RECORD_DIR),
    )


def _run(module, cmd, pending=False):
    rc, out, err = module.run_command(cmd, environ_update={"LC_ALL": "C"})
    if rc != 0:
        msg = "%s failed (rc=%d): %s" % (" ".join(cmd), rc, (err or out).strip())
        if pending:
            msg += ("; the boot loader configuration is stale: the regeneration is retried on the next run "
                    "(pending while %s exists)" % REGEN_PENDING)
        module.fail_json(msg=msg)
    return out


def _kernel_image(kver):
    images = [p for p in ("/lib/modules/%s/vmlinuz" % kver, "/boot/vmlinuz-%s" % kver) if os.path.exists(p)]
    images += glob.glob("/usr/lib/modules/%s/vmlinuz" % kver)
    return images[0] if images else None


def _regenerate(module, bootloader):
    """Run the boot loader's configuration tool; fails the module (the pending marker stays) on error."""
    if bootloader == "grub":
        tool = module.get_bin_path("update-grub")
        if tool:
            _run(module, [tool], pending=True)
        else:
            mk = module.get_bin_path("grub-mkconfig") or module.get_bin_path("grub2-mkconfig", required=True)
            cfg = "/boot/grub2/grub.cfg" if os.path.exists("/boot/grub2") else "/boot/grub/grub.cfg"
            _run(module, [mk, "-o", cfg], pending=True)
    else:
        ki = module.get_bin_path("kernel-install", required=True)
        kver = os.uname()[2]
        image = _kernel_image(kver)
        if not image:
            module.fail_json(msg="no kernel image for %s to pass to kernel-install; the regeneration is retried on "
                                 "the next run (pending while %s exists)" % (kver, REGEN_PENDING))
        _run(module, [ki, "add", kver, image], pending=True)


def _apply_file(module, path, plan_text, bootloader, owned=None):
    """Make ``path`` hold ``plan_text(current text)[0]`` (None: absent) and regenerate the boot loader
    configuration; returns (result, configured tokens).

    The file is read, planned, written and the boot loader regenerated under the file's lock, so runs at once
    never lose each other's arguments.  A regeneration that failed in an earlier run is retried even though the
    file already matches: the REGEN_PENDING marker is written before the file changes and removed only after
    the tool succeeded.  ``owned``: the file is the module's own, written whole (see _files.ownership_problem).
    """
    regen = module.params["update_bootloader"]
    if regen and not module.check_mode:
        # a first look without the lock: the marker goes down before this run waits for the lock (checked
        # again under it), so runs at once never wait on each other to write it
        if read_text(path) != plan_text(read_text(path))[0]:
            mark_pending(REGEN_PENDING, "bootloader=%s\nfile=%s\n" % (bootloader, path))
    with (file_lock(path) if not module.check_mode else _nolock()):
        before = read_text(path)
        new_text, configured = plan_text(before)
        pending = os.path.exists(REGEN_PENDING)
        if regen and not module.check_mode and before != new_text and not pending:
            mark_pending(REGEN_PENDING, "bootloader=%s\nfile=%s\n" % (bootloader, path))
        if new_text is None:
            r = remove_file(module, path, backup=module.params["backup"], owned=owned)
        else:
            r = ensure_file(module, path, new_text, mode=0o644, backup=module.params["backup"], owned=owned)
        r["regenerated"] = False
        if regen and (r["changed"] or pending):
            r["changed"] = True
            if not module.check_mode:
                _regenerate(module, bootloader)
                clear_pending(REGEN_PENDING)
                r["regenerated"] = True
        elif pending:
            module.warn("a boot loader regeneration failed in an earlier run and update_bootloader is false: "
                        "run it yourself, then remove %s" % REGEN_PENDING)
    return r, configured


def _grub_base(module):
    return split_cmdline(_run(module, ["/bin/sh", "-c", GRUB_BASE_SCRIPT, "sh", GRUB_DROPIN]))


def running_now():
    """The running kernel's parameters: /proc/cmdline up to a bare ``--`` (what follows went to init)."""
    return kernel_part(read_text(PROC_CMDLINE) or "")[0]


def _grubby_current(module):
    grubby = module.get_bin_path("grubby", required=True)
    info = _run(module, [grubby, "--info=DEFAULT"])
    m = next((x for x in (re.fullmatch(r'args="?(.*?)"?', line) for line in info.splitlines()) if x), None)
    return grubby, kernel_args(split_cmdline(m.group(1) if m else ""))


def _systemd_boot_text(text):
    """/etc/kernel/cmdline's text; when absent, the running command line (what kernel-install uses then): the kernel's
    parameters without the boot loader's BOOT_IMAGE= and initrd=, and init's arguments after ``--`` as they are."""
    if text is None:
        tokens, init = kernel_part(read_text(PROC_CMDLINE) or "")
        text = join_cmdline([t for t in tokens if not t.startswith(("BOOT_IMAGE=", "initrd="))], init)
    return text


def configured_now(module, bootloader):
    """The command line configured for the next boot, as this module sees it (before any change)."""
    if bootloader == "grub":
        return kernel_args(_grub_base(module)) + parse_grub_dropin(read_text(GRUB_DROPIN))
    if bootloader == "grubby":
        return _grubby_current(module)[1]
    return kernel_part(_systemd_boot_text(read_text(SYSTEMD_BOOT_CMDLINE)))[0]


def do_grub(module, ops, strict=True):
    base = kernel_args(_grub_base(module))
    for args, state in ops:
        if state == "present":
            for arg in overridden(base, args):
                module.warn("%s overrides another value of the same key in /etc/default/grub (the later one wins)"
                            % arg)

    def plan_text(text):
        configured = base + parse_grub_dropin(text)
        for args, state in ops:
            text, configured = plan_grub(text, base, args, state, strict=strict)
        return text, configured
    return _apply_file(module, GRUB_DROPIN, plan_text, "grub", owned=HEADER)


def do_grubby(module, ops, strict=True):
    grubby, current = _grubby_current(module)
    configured = current
    for args, state in ops:
        configured = apply_args(configured, args, state)
    r = {"changed": configured != current}
    if module._diff:
        r["diff"] = {"before": " ".join(current) + "\n", "after": " ".join(configured) + "\n",
                     "before_header": "grubby DEFAULT args", "after_header": "grubby DEFAULT args"}
    if r["changed"] and not module.check_mode:
        for args, state in ops:
            if args:
                flag = "--args=%s" if state == "present" else "--remove-args=%s"
                _run(module, [grubby, "--update-kernel=ALL", flag % " ".join(args)])
    return r, configured


def do_systemd_boot(module, ops, strict=True):
    def plan_text(text):
        seed = _systemd_boot_text(text)
        new, configured = seed, kernel_part(seed)[0]
        for args, state in ops:
            new, configured = plan_cmdline_file(new, args, state)
        if text is None and new == seed:
            # nothing to change: the file stays absent (kernel-install goes on using the running command line)
            return None, configured
        return new, configured
    return _apply_file(module, SYSTEMD_BOOT_CMDLINE, plan_text, "systemd-boot")


def _other_owners_args(record_dir, own_path):
    """Canonical forms of the arguments the other owners' records hold."""
    out = set()
    for path in sorted(glob.glob(os.path.join(record_dir, "*.json"))):
        if os.path.abspath(path) != os.path.abspath(own_path):
            out.update(canonical(e["arg"]) for e in parse_record(read_text(path), path))
    return out


def _write_record(module, path, text):
    if text is None:
        r = remove_file(module, path, owned=True)
        if r["changed"] and not module.check_mode:
            try:
                os.rmdir(os.path.dirname(path))   # the last record gone: leave no empty directory behind
            except OSError:
                pass
        return r
    return ensure_file(module, path, text, mode=0o644, owned=True)


def run(module):
    p = module.params
    owner = p["owner"]
    if owner is not None and not OWNER_RE.fullmatch(owner):
        module.fail_json(msg="owner must be 1-64 letters, digits, '_', '.' and '-' (starting with a letter or "
                             "digit), got %r" % owner)
    if not p["args"] and not (owner and p["state"] == "absent"):
        module.fail_json(msg="args must name at least one kernel argument (key or key=value)")
    try:
        validate_args(p["args"])
    except GpuopsError as exc:
        fail(module, exc)
    for opt in ("record_dir",):
        problem = path_problem(p[opt], opt)
        if problem:
            module.fail_json(msg=problem)
    bootloader = p["bootloader"]
    if bootloader == "auto":
        bootloader = detect_bootloader("/", module.get_bin_path)
        if bootloader is None:
            module.fail_json(msg="cannot tell which boot loader this host uses (no update-grub/grub-mkconfig with "
                                 "/etc/default/grub, no grubby with BLS entries, no systemd-boot); set bootloader")
    handler = {"grub": do_grub, "grubby": do_grubby, "systemd-boot": do_systemd_boot}[bootloader]
    rec_path = record_path(p["record_dir"], owner) if owner else None
    # the files this run may read and replace, checked before anything changes
    targets = {"grub": [GRUB_DROPIN], "systemd-boot": [SYSTEMD_BOOT_CMDLINE]}.get(bootloader, [])
    if p["update_bootloader"] and not module.check_mode and targets:
        targets.append(REGEN_PENDING)
    if rec_path:
        targets.append(rec_path)
    # the GRUB drop-in and the owners' records are the module's own, written whole: never through a link, never over
    # someone else's file; /etc/kernel/cmdline is the user's own file on a systemd-boot host (the module edits the
    # arguments in it and keeps the rest): like the runtime configs, it is edited through a link the user made
    owned = {GRUB_DROPIN: HEADER, rec_path: True}
    problems = [x for x in (target_problem(t, owned=owned.get(t)) for t in targets) if x]
    if problems:
        module.fail_json(msg="%s; nothing was changed" % "; ".join(problems), bootloader=bootloader)
    if bootloader == "grub" and p["state"] == "present" and "--" in _grub_base(module):
        module.fail_json(msg="the GRUB command line (/etc/default/grub or a drop-in) holds a bare '--': what follows it "
                             "goes to init, and %s would append the arguments after it; move init's arguments to the "
                             "end of GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub; nothing was changed" % GRUB_DROPIN,
                         bootloader=bootloader)
    extra = {}
    diffs = []
    try:
        # an owner's record is read, planned and written under its lock, around the boot loader change
        with (file_lock(rec_path) if rec_path and not module.check_mode else _nolock()):
            if rec_path:
                rec_before = read_text(rec_path)
                entries = parse_record(rec_before, rec_path)
                plan = plan_owned(configured_now(module, bootloader), p["args"], p["state"], entries,
                                  _other_owners_args(p["record_dir"], rec_path))
                rec_after = render_record(owner, plan["entries"])
                ops = plan["ops"]
                extra = dict(record=rec_path, recorded=[e["arg"] for e in plan["entries"]], kept=plan["kept"],
                             removed=plan["removed"])
                rec_r = {"changed": False}
                if p["state"] == "present" and rec_after != rec_before:
                    # recorded before the argument is added: a run killed in between never leaves an
                    # argument of ours that no record names
                    rec_r = _write_record(module, rec_path, rec_after)
            else:
                ops = [(p["args"], p["state"])]
            r, configured = handler(module, ops, strict=not rec_path)
            if r.get("diff"):
                diffs.append(r["diff"])
            if rec_path:
                if p["state"] == "absent" and rec_after != rec_before:
                    # forgotten only after the removal: a run killed in between removes them again next time
                    rec_r = _write_record(module, rec_path, rec_after)
                if rec_r.get("diff"):
                    diffs.append(rec_r["diff"])
                r["changed"] = r["changed"] or rec_r["changed"]
    except GpuopsError as exc:
        fail(module, exc, bootloader=bootloader)
    except OSError as exc:  # a file that became unreadable or unwritable after the checks above
        module.fail_json(msg="%s: %s" % (bootloader, exc), bootloader=bootloader)
    running = running_now()
    if rec_path and p["state"] == "absent":
        pending = reboot_pending_absent(running, configured, p["args"] or extra["removed"])
    else:
        pending = unmet(running, p["args"], p["state"])
    result = dict(changed=r["changed"], bootloader=bootloader, configured=configured, running=running,
                  unmet=pending, reboot_required=bool(pending), regenerated=r.get("regenerated", False), **extra)
    if r.get("path"):
        result["path"] = r["path"]
    if r.get("backup_file"):
        result["backup_file"] = r["backup_file"]
    if module._diff:
        result["diff"] = _diff.entries(diffs)
    module.exit_json(**result)


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    run(module)


if __name__ == "__main__":
    main()
