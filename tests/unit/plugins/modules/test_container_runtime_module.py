# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""container_runtime's orchestration (write -> restart -> health -> restore) with a systemd stand-in.

The runtime lane covers the same flow against real daemons with restart_mode=command/signal;
this covers restart_mode=systemd, which needs a systemd that the lab machines do not run.
"""
from __future__ import annotations

import os
import shutil
import socket

import pytest

from ansible_collections.gpuops.nvidia.plugins.modules import container_runtime as mod


class Failed(Exception):
    pass


class FakeModule(object):
    """Just what container_runtime.run() uses from AnsibleModule."""

    def __init__(self, params, on_restart, check_mode=False):
        self.params = params
        self.check_mode = check_mode
        self._diff = True
        self.calls = []
        self.warnings = []
        self.on_restart = on_restart

    def run_command(self, argv, **_kw):
        self.calls.append(list(argv))
        if argv[1:2] == ["restart"]:
            self.on_restart(len([c for c in self.calls if c[1:2] == ["restart"]]))
            return 0, "", ""
        if os.path.basename(argv[0]) == "journalctl":
            return 0, "level=fatal msg=\"failed to load TOML: boom\"\n", ""
        return 1, "", "unexpected call"

    def get_bin_path(self, name, required=False):
        return {"systemctl": "/bin/systemctl", "journalctl": "/bin/journalctl"}.get(name)

    def warn(self, msg):
        self.warnings.append(msg)

    def fail_json(self, **kw):
        raise Failed(kw)

    def atomic_move(self, src, dst, unsafe_writes=False):
        shutil.move(src, dst)

    def backup_local(self, path):
        shutil.copy(path, path + ".bak")
        return path + ".bak"


class Listener(object):
    def __init__(self, path):
        self.path = path
        self.sock = None

    def up(self):
        if os.path.exists(self.path):
            os.unlink(self.path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(5)

    def down(self):
        if self.sock:
            self.sock.close()
            self.sock = None
        if os.path.exists(self.path):
            os.unlink(self.path)


@pytest.fixture
def env(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text("# site\nversion = 2\n")
    lst = Listener(str(tmp_path / "d.sock"))
    yield cfg, lst
    lst.down()


def params(cfg, sock, **kw):
    p = {k: v.get("default") for k, v in mod.argument_spec().items()}
    p.update(runtime="docker" if str(cfg).endswith(".json") else "containerd", config_path=str(cfg), socket=sock,
             restart_mode="systemd", restart_timeout=1, validate=False,
             state_dir=os.path.join(os.path.dirname(str(cfg)), "state"))  # not the host's /var/lib/gpuops
    p.update(kw)
    return p


def test_systemd_restart_once_on_change(env):
    cfg, lst = env
    m = FakeModule(params(cfg, lst.path), lambda n: lst.up())
    res = mod.run(m)
    assert res["changed"] and res["restarted"]
    assert [c for c in m.calls if c[1:2] == ["restart"]] == [["/bin/systemctl", "restart", "containerd"]]
    assert "BinaryName" in cfg.read_text() and cfg.read_text().startswith("# site\n")
    m2 = FakeModule(params(cfg, lst.path), lambda n: lst.up())
    res = mod.run(m2)
    assert not res["changed"] and not res["restarted"] and m2.calls == []


def test_systemd_failure_restores_and_reports_journal(env):
    cfg, lst = env
    before = cfg.read_text()

    def restart(n):
        if n == 1:
            lst.down()      # the daemon does not come back with the new config
        else:
            lst.up()        # it does with the restored one
    m = FakeModule(params(cfg, lst.path, backup=True), restart)
    with pytest.raises(Failed) as e:
        mod.run(m)
    res = e.value.args[0]
    assert res["restored"] is True and "is running again" in res["msg"]
    assert "failed to load TOML: boom" in res["msg"]           # the daemon's own error
    assert cfg.read_text() == before
    assert len([c for c in m.calls if c[1:2] == ["restart"]]) == 2


def test_still_down_is_said_loudly(env):
    cfg, lst = env
    m = FakeModule(params(cfg, lst.path), lambda n: lst.down())
    with pytest.raises(Failed) as e:
        mod.run(m)
    assert e.value.args[0]["restored"] is False and "STILL DOWN" in e.value.args[0]["msg"]


def test_check_mode_writes_and_restarts_nothing(env):
    cfg, lst = env
    before = cfg.read_text()
    m = FakeModule(params(cfg, lst.path), lambda n: lst.up(), check_mode=True)
    res = mod.run(m)
    assert res["changed"] and not res["restarted"] and cfg.read_text() == before and m.calls == []
    assert "BinaryName" in res["diff"][0]["after"]


def test_bad_input_fails_before_anything(env, tmp_path):
    cfg, lst = env
    bad = tmp_path / "daemon.json"
    bad.write_text("{nope")
    m = FakeModule(params(bad, lst.path), lambda n: lst.up())
    with pytest.raises(Failed) as e:
        mod.run(m)
    assert "not valid JSON" in e.value.args[0]["msg"] and m.calls == [] and bad.read_text() == "{nope"


def test_comment_only_difference_does_not_restart(env):
    cfg, lst = env
    m = FakeModule(params(cfg, lst.path, restart_mode="none"), lambda n: None)
    mod.run(m)
    cfg.write_text(cfg.read_text().replace("# site", "# site, edited by hand"))
    m = FakeModule(params(cfg, lst.path), lambda n: lst.up())
    res = mod.run(m)
    assert not res["changed"] and not res["restarted"]
