# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""A failed initramfs rebuild is retried on the next run (issue 15, defect 3), for the driver role's
nouveau blacklist and the vfio role's blacklist: the roles' real task files run under ansible-playbook
(connection local), with every path under tmp_path and a stand-in rebuild command that fails first.

A marker file is created before the blacklist changes and removed only after the rebuild succeeded;
the rebuild runs when the file changed or the marker exists.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from conftest import ansible_command

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
COLLECTIONS = os.environ.get("GPUOPS_COLLECTIONS", os.path.join(REPO, ".collections"))
ROLES = os.path.join(COLLECTIONS, "ansible_collections", "gpuops", "nvidia", "roles")
PLAYBOOK = ansible_command("ansible-playbook")


class Rebuild:
    """A stand-in initramfs tool: logs each call, fails while ``fail`` exists."""

    def __init__(self, tmp_path):
        self.log = tmp_path / "rebuilds.log"
        self.fail = tmp_path / "fail"
        self.path = tmp_path / "fake-initramfs"
        self.path.write_text('#!/bin/sh\necho "$*" >> %s\n[ -e %s ] && { echo "out of space on /boot" >&2; exit 1; }\n'
                             'exit 0\n' % (self.log, self.fail))
        self.path.chmod(0o755)

    @property
    def calls(self):
        return self.log.read_text().splitlines() if self.log.exists() else []


def play(tmp_path, role, tasks_from, extra, check=False, extra_files=()):
    book = tmp_path / "play.yml"
    book.write_text(yaml.safe_dump([{
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "tasks": [{"ansible.builtin.include_role": {"name": "gpuops.nvidia." + role, "tasks_from": t}}
                  for t in tasks_from]}]))
    evars = tmp_path / "extra.json"
    evars.write_text(json.dumps(dict(extra, ansible_python_interpreter=sys.executable)))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"), ANSIBLE_REMOTE_TEMP=str(tmp_path / "ansible-tmp"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_STDOUT_CALLBACK="default", ANSIBLE_RETRY_FILES_ENABLED="0")
    cmd = [PLAYBOOK, "-i", "localhost,", str(book), "-e", "@%s" % evars] + (["--check"] if check else [])
    cmd += [x for f in extra_files for x in ("-e", "@%s" % f)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=str(tmp_path), timeout=300, check=False)


def recap(res):
    line = [x for x in res.stdout.splitlines() if x.startswith("localhost") and "ok=" in x]
    assert line, res.stdout + res.stderr
    return dict(kv.split("=") for kv in line[-1].split(":", 1)[1].split())


def retry_sequence(tmp_path, role, tasks_from, extra, blacklist, marker):
    rebuild = Rebuild(tmp_path)
    rebuild.fail.write_text("")
    first = play(tmp_path, role, tasks_from, extra)
    assert first.returncode != 0 and "out of space" in first.stdout, first.stdout
    assert os.path.exists(blacklist) and len(rebuild.calls) == 1

    second = play(tmp_path, role, tasks_from, extra)       # blacklist unchanged, rebuild still due (and fails)
    assert len(rebuild.calls) == 2, "the failed rebuild was not retried:\n" + second.stdout
    assert second.returncode != 0 and os.path.exists(marker)

    rebuild.fail.unlink()
    check = play(tmp_path, role, tasks_from, extra, check=True)
    assert check.returncode == 0 and len(rebuild.calls) == 2, check.stdout   # check mode runs nothing
    third = play(tmp_path, role, tasks_from, extra)
    assert third.returncode == 0 and len(rebuild.calls) == 3, third.stdout
    assert not os.path.exists(marker)

    fourth = play(tmp_path, role, tasks_from, extra)
    assert fourth.returncode == 0 and len(rebuild.calls) == 3, fourth.stdout
    assert recap(fourth)["changed"] == "0", fourth.stdout
    return rebuild


def test_driver_blacklist_rebuild_is_retried(tmp_path):
    rebuild_cmd = str(tmp_path / "fake-initramfs")
    blacklist = str(tmp_path / "etc/modprobe.d/gpuops-nvidia-blacklist.conf")
    os.makedirs(os.path.dirname(blacklist))
    extra = {
        "driver_state": "present", "driver_blacklist_nouveau": True,
        "driver_plan": {"blacklist": {"path": blacklist, "content": "blacklist nouveau\n"},
                        "initramfs_command": [rebuild_cmd, "-u", "-k", "all"], "manage_packages": True,
                        "changes": []},
        "gpuops_state_dir": str(tmp_path / "state"),
    }
    rebuild = retry_sequence(tmp_path, "driver", ["blacklist.yml"], extra, blacklist,
                             str(tmp_path / "state/driver-initramfs.pending"))
    assert rebuild.calls[0] == "-u -k all"

    # removal: the marker goes down before the file does, and a failed rebuild is retried the same way
    rebuild.fail.write_text("")
    extra["driver_state"] = "absent"
    assert play(tmp_path, "driver", ["blacklist.yml"], extra).returncode != 0
    assert not os.path.exists(blacklist) and os.path.exists(tmp_path / "state/driver-initramfs.pending")
    rebuild.fail.unlink()
    assert play(tmp_path, "driver", ["blacklist.yml"], extra).returncode == 0
    assert len(rebuild.calls) == 5 and not os.path.exists(tmp_path / "state/driver-initramfs.pending")


def vfio_role_vars():
    path = os.path.join(ROLES, "vfio", "vars", "main.yml")
    if not os.path.exists(path):
        pytest.fail("roles/vfio writes fixed paths under /etc (no vars/main.yml to point them elsewhere): "
                    "not running it on this machine")
    with open(path) as f:
        v = yaml.safe_load(f) or {}
    for name in ("_vfio_blacklist_path", "_vfio_initramfs_command", "_vfio_initramfs_pending"):
        if name not in v:
            pytest.fail("roles/vfio/vars/main.yml has no %s: not running the role on this machine" % name)
    return v


def test_vfio_blacklist_rebuild_is_retried(tmp_path):
    vfio_role_vars()
    blacklist = str(tmp_path / "etc/modprobe.d/gpuops-vfio-blacklist.conf")
    os.makedirs(os.path.dirname(blacklist))
    extra = {
        "vfio_state": "present",
        "_vfio_blacklist_path": blacklist,
        "_vfio_initramfs_command": [str(tmp_path / "fake-initramfs"), "-u"],
        "gpuops_state_dir": str(tmp_path / "state"),
    }
    retry_sequence(tmp_path, "vfio", ["blacklist.yml", "initramfs.yml"], extra, blacklist,
                   str(tmp_path / "state/vfio-initramfs.pending"))


def test_vfio_marker_left_when_rebuilds_are_off(tmp_path):
    """vfio_update_initramfs=false (the VM lane): nothing is rebuilt and reruns report no change."""
    vfio_role_vars()
    rebuild = Rebuild(tmp_path)
    blacklist = str(tmp_path / "etc/modprobe.d/gpuops-vfio-blacklist.conf")
    os.makedirs(os.path.dirname(blacklist))
    extra = {"vfio_state": "present", "vfio_update_initramfs": False, "_vfio_blacklist_path": blacklist,
             "_vfio_initramfs_command": [str(rebuild.path), "-u"], "gpuops_state_dir": str(tmp_path / "state")}
    assert play(tmp_path, "vfio", ["blacklist.yml", "initramfs.yml"], extra).returncode == 0
    again = play(tmp_path, "vfio", ["blacklist.yml", "initramfs.yml"], extra)
    assert again.returncode == 0 and recap(again)["changed"] == "0" and rebuild.calls == []
