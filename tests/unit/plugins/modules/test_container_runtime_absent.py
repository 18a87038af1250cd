# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""container_runtime state=absent (uninstall) and cdi_spec state=absent, through the real
AnsibleModule (argument spec, check mode, diff, warnings), on containerd v2/v3/v4 configs,
drop-in mode, CRI-O and Docker.

The promise under test: present -> absent gives back the original file byte for byte
when nobody touched it in between; after a user edit only our entries go and the edit stays.
"""
from __future__ import annotations

import json
import os
import socket
import tomllib

import pytest
from conftest import run_module, runtime_args as args_for, runtime_fixture as fx

from ansible_collections.gpuops.nvidia.plugins.module_utils._container_runtime import RecordStore
from ansible_collections.gpuops.nvidia.plugins.modules import cdi_spec
from ansible_collections.gpuops.nvidia.plugins.modules import container_runtime as mod

BIN = "/usr/bin/nvidia-container-runtime"
V2 = "io.containerd.grpc.v1.cri"
V3 = "io.containerd.cri.v1.runtime"


def call(capsys, main, args):
    """run_module (this run's warnings only, as a module on a target), warnings as plain messages."""
    rc, res = run_module(capsys, main, args)
    res["warnings"] = [w["event"]["msg"] if isinstance(w, dict) else w for w in res.get("warnings", [])]
    res["warnings"] = [w for w in res["warnings"] if "runtime_path" not in w]
    return rc, res


def crt(capsys, args, check=False, diff=False):
    if check:
        args = dict(args, _ansible_check_mode=True)
    if diff:
        args = dict(args, _ansible_diff=True)
    rc, res = call(capsys, mod.main, args)
    assert rc == 0 and not res.get("failed"), res
    return res


def records(state_dir):
    return sorted(os.listdir(state_dir)) if os.path.isdir(state_dir) else []


def cri(path, plugin):
    return tomllib.loads(path.read_text())["plugins"][plugin]["containerd"]


# -- containerd main file -------------------------------------------------------------

@pytest.mark.parametrize("name", ["v2-custom.toml", "v2-default-1.6.toml", "v3-custom.toml", "v4-default-2.4.toml"])
def test_present_then_absent_gives_the_original_bytes_back(runtime_host, capsys, name):
    d, state = runtime_host
    cfg = d / "config.toml"
    original = fx("containerd", name)
    cfg.write_bytes(original)
    os.chmod(cfg, 0o600)
    res = crt(capsys, args_for(cfg, state, set_as_default=True, enable_cdi=True))
    assert res["changed"] and cfg.read_bytes() != original
    assert len(records(state)) == 1
    rec = json.loads((open(os.path.join(state, records(state)[0])).read()))
    assert rec["path"] == str(cfg) and rec["pristine_existed"] is True and rec["runtime_names"] == ["nvidia"]
    res = crt(capsys, args_for(cfg, state, state="absent"), diff=True)
    assert res["changed"] and res["restored_files"] == [str(cfg)] and res["edited_files"] == []
    assert not res.get("warnings")
    assert cfg.read_bytes() == original
    assert os.stat(cfg).st_mode & 0o777 == 0o600
    assert res["diff"][0]["after"] == original.decode()
    assert records(state) == []                      # the record goes with the uninstall


def test_exact_bytes_survive_crlf_and_no_final_newline(runtime_host, capsys):
    d, state = runtime_host
    cfg = d / "config.toml"
    original = b"# site\r\nversion = 2\r\n[plugins.\"io.containerd.grpc.v1.cri\"]\r\n  sandbox_image = \"p:1\""
    cfg.write_bytes(original)
    crt(capsys, args_for(cfg, state))
    assert b"BinaryName" in cfg.read_bytes()
    crt(capsys, args_for(cfg, state, state="absent"))
    assert cfg.read_bytes() == original


def test_file_created_by_present_is_removed_by_absent(runtime_host, capsys):
    d, state = runtime_host
    cfg = d / "config.toml"
    crt(capsys, args_for(cfg, state))
    assert cfg.exists()
    res = crt(capsys, args_for(cfg, state, state="absent"))
    assert res["removed_files"] == [str(cfg)] and not cfg.exists() and records(state) == []


@pytest.mark.parametrize("name,plugin", [("v2-custom.toml", V2), ("v3-custom.toml", V3)])
def test_absent_after_a_user_edit_removes_only_ours(runtime_host, capsys, name, plugin):
    d, state = runtime_host
    cfg = d / "config.toml"
    original = fx("containerd", name).decode()
    cfg.write_text(original)
    crt(capsys, args_for(cfg, state, set_as_default=True))
    edited = cfg.read_text().replace("oom_score = -999", "oom_score = -500  # tuned by the site") + "\n# site note\n"
    cfg.write_text(edited)
    res = crt(capsys, args_for(cfg, state, state="absent"))
    assert res["changed"] and res["edited_files"] == [str(cfg)] and res["restored_files"] == []
    assert any("not byte-identical" in w for w in res["warnings"]), res["warnings"]
    text = cfg.read_text()
    assert "oom_score = -500  # tuned by the site" in text and "# site note" in text    # user edit kept
    assert "BinaryName" not in text and "nvidia" not in text
    ctd = cri(cfg, plugin)
    assert ctd["default_runtime_name"] == "runc" and "nvidia" not in ctd["runtimes"]
    expected = tomllib.loads(original)
    expected["oom_score"] = -500
    assert tomllib.loads(text) == expected           # the original data plus the user's edit, nothing of ours
    for line in original.splitlines():
        if line.strip().startswith("#") and "oom_score" not in line:
            assert line in text                      # comments survive
    assert records(state) == []
    assert not crt(capsys, args_for(cfg, state, state="absent"))["changed"]


def test_user_edit_between_two_writes_is_not_undone(runtime_host, capsys):
    """A second present write after a user edit must not make absent restore the pristine
    copy over the user's edit (the record remembers that the file diverged)."""
    d, state = runtime_host
    cfg = d / "config.toml"
    original = fx("containerd", "v3-custom.toml").decode()
    cfg.write_text(original)
    crt(capsys, args_for(cfg, state))
    cfg.write_text(cfg.read_text() + "\n[debug]\n  level = 'debug'\n")
    assert crt(capsys, args_for(cfg, state, set_as_default=True))["changed"]
    res = crt(capsys, args_for(cfg, state, state="absent"))
    assert res["edited_files"] == [str(cfg)]
    data = tomllib.loads(cfg.read_text())
    assert data["debug"] == {"level": "debug"}
    assert "nvidia" not in data["plugins"][V3]["containerd"]["runtimes"]
    assert data["plugins"][V3]["containerd"]["default_runtime_name"] == "runc"


def test_pristine_default_runtime_is_put_back(runtime_host, capsys):
    d, state = runtime_host
    cfg = d / "config.toml"
    cfg.write_text(fx("containerd", "v3-custom.toml").decode().replace("default_runtime_name = 'runc'",
                                                                       "default_runtime_name = 'runsc'"))
    crt(capsys, args_for(cfg, state, set_as_default=True))
    cfg.write_text(cfg.read_text() + "# touched\n")
    crt(capsys, args_for(cfg, state, state="absent"))
    assert cri(cfg, V3)["default_runtime_name"] == "runsc"


def test_two_runtime_names_in_one_file(runtime_host, capsys):
    d, state = runtime_host
    cfg = d / "config.toml"
    original = fx("containerd", "v2-custom.toml")
    cfg.write_bytes(original)
    crt(capsys, args_for(cfg, state))
    crt(capsys, args_for(cfg, state, runtime_name="nvidia-cdi", runtime_path="/usr/bin/nvidia-container-runtime.cdi"))
    res = crt(capsys, args_for(cfg, state, state="absent"))
    assert res["edited_files"] == [str(cfg)] and not res.get("warnings")
    rts = cri(cfg, V2)["runtimes"]
    assert "nvidia" not in rts and "nvidia-cdi" in rts     # the other runtime is still someone's
    assert len(records(state)) == 1
    res = crt(capsys, args_for(cfg, state, state="absent", runtime_name="nvidia-cdi"))
    assert res["restored_files"] == [str(cfg)] and cfg.read_bytes() == original and records(state) == []


def test_absent_without_a_record_removes_ours_and_says_so(runtime_host, capsys):
    d, state = runtime_host
    cfg = d / "config.toml"
    original = fx("containerd", "v3-custom.toml").decode()
    cfg.write_text(original)
    crt(capsys, args_for(cfg, str(d / "other-state"), set_as_default=True))
    res = crt(capsys, args_for(cfg, state, state="absent"))
    assert res["edited_files"] == [str(cfg)] and any("no record" in w for w in res["warnings"])
    assert tomllib.loads(cfg.read_text()) == tomllib.loads(original)


def test_absent_on_an_untouched_config_changes_nothing(runtime_host, capsys):
    d, state = runtime_host
    cfg = d / "config.toml"
    original = fx("containerd", "v3-custom.toml")
    cfg.write_bytes(original)
    res = crt(capsys, args_for(cfg, state, state="absent"), diff=True)
    assert not res["changed"] and res["changed_files"] == [] and res["diff"] == []
    assert cfg.read_bytes() == original and records(state) == []
    res = crt(capsys, args_for(d / "missing.toml", state, state="absent"))
    assert not res["changed"] and not (d / "missing.toml").exists()


def test_absent_twice_is_not_changed(runtime_host, capsys):
    d, state = runtime_host
    cfg = d / "config.toml"
    cfg.write_bytes(fx("containerd", "v2-custom.toml"))
    crt(capsys, args_for(cfg, state, enable_cdi=True))
    assert crt(capsys, args_for(cfg, state, state="absent"))["changed"]
    res = crt(capsys, args_for(cfg, state, state="absent"))
    assert not res["changed"] and not res["restarted"]


def test_check_mode_absent_changes_nothing(runtime_host, capsys):
    d, state = runtime_host
    cfg = d / "config.toml"
    original = fx("containerd", "v3-custom.toml")
    cfg.write_bytes(original)
    crt(capsys, args_for(cfg, state, set_as_default=True))
    written = cfg.read_bytes()
    recs = {r: open(os.path.join(state, r), "rb").read() for r in records(state)}
    res = crt(capsys, args_for(cfg, state, state="absent"), check=True, diff=True)
    assert res["changed"] and res["restored_files"] == [str(cfg)]
    assert res["diff"][0]["before"] == written.decode() and res["diff"][0]["after"] == original.decode()
    assert cfg.read_bytes() == written                                # nothing written
    assert {r: open(os.path.join(state, r), "rb").read() for r in records(state)} == recs
    # and check mode of present keeps the state dir empty
    other = d / "other.toml"
    crt(capsys, args_for(other, str(d / "state2")), check=True)
    assert not other.exists() and not (d / "state2").exists()


# -- containerd drop-in mode ------------------------------------------------------------

@pytest.mark.parametrize("name", ["v2-custom.toml", "v3-custom.toml"])
def test_drop_in_absent_removes_drop_in_and_import(runtime_host, capsys, name):
    d, state = runtime_host
    cfg = d / "config.toml"
    drop = d / "conf.d" / "99-nvidia.toml"
    original = fx("containerd", name)
    cfg.write_bytes(original)
    crt(capsys, args_for(cfg, state, drop_in_path=str(drop)))
    assert drop.exists() and str(drop) in cfg.read_text()
    assert len(records(state)) == 2                      # main file and drop-in
    res = crt(capsys, args_for(cfg, state, state="absent", drop_in_path=str(drop)), diff=True)
    assert res["restored_files"] == [str(cfg)] and res["removed_files"] == [str(drop)]
    assert cfg.read_bytes() == original and not drop.exists() and records(state) == []
    assert res["diff"][1]["after_header"].endswith("(absent)")


def test_drop_in_found_through_the_record(runtime_host, capsys):
    d, state = runtime_host
    cfg = d / "config.toml"
    drop = d / "conf.d" / "99-nvidia.toml"
    original = fx("containerd", "v3-custom.toml")
    cfg.write_bytes(original)
    crt(capsys, args_for(cfg, state, drop_in_path=str(drop)))
    res = crt(capsys, args_for(cfg, state, state="absent"))          # no drop_in_path given
    assert res["drop_in_path"] == str(drop) and not drop.exists() and cfg.read_bytes() == original


def test_drop_in_absent_after_user_edit_of_main(runtime_host, capsys):
    d, state = runtime_host
    cfg = d / "config.toml"
    drop = d / "conf.d" / "99-nvidia.toml"
    cfg.write_bytes(fx("containerd", "v2-custom.toml"))
    crt(capsys, args_for(cfg, state, drop_in_path=str(drop)))
    cfg.write_text(cfg.read_text() + "\n[debug]\n  level = \"info\"\n")
    res = crt(capsys, args_for(cfg, state, state="absent", drop_in_path=str(drop)))
    assert res["edited_files"] == [str(cfg)] and res["removed_files"] == [str(drop)]
    data = tomllib.loads(cfg.read_text())
    assert "imports" not in data and data["debug"] == {"level": "info"} and not drop.exists()


def test_drop_in_absent_keeps_other_imports(runtime_host, capsys):
    d, state = runtime_host
    cfg = d / "config.toml"
    drop = d / "conf.d" / "99-nvidia.toml"
    cfg.write_text("version = 2\nimports = [\"/etc/containerd/site.toml\"]\n")
    crt(capsys, args_for(cfg, state, drop_in_path=str(drop)))
    cfg.write_text(cfg.read_text() + "# edited\n")
    crt(capsys, args_for(cfg, state, state="absent", drop_in_path=str(drop)))
    assert tomllib.loads(cfg.read_text())["imports"] == ["/etc/containerd/site.toml"]


# -- CRI-O and Docker ---------------------------------------------------------------------

def test_crio_drop_in_is_deleted(runtime_host, capsys):
    d, state = runtime_host
    drop = d / "crio.conf.d" / "99-nvidia.toml"
    a = dict(runtime="crio", config_path=str(drop), state_dir=state, restart_mode="none", validate=False)
    crt(capsys, dict(a, set_as_default=True))
    assert drop.exists()
    res = crt(capsys, dict(a, state="absent"))
    assert res["removed_files"] == [str(drop)] and not drop.exists()
    assert not crt(capsys, dict(a, state="absent"))["changed"]


def test_crio_drop_in_with_user_additions_keeps_them(runtime_host, capsys):
    d, state = runtime_host
    drop = d / "crio.conf.d" / "99-nvidia.toml"
    a = dict(runtime="crio", config_path=str(drop), state_dir=state, restart_mode="none", validate=False)
    crt(capsys, dict(a, set_as_default=True))
    drop.write_text(drop.read_text() + "\n[crio.runtime.runtimes.kata]\nruntime_path = \"/usr/bin/kata\"\n")
    crt(capsys, dict(a, state="absent"))
    data = tomllib.loads(drop.read_text())
    assert data == {"crio": {"runtime": {"runtimes": {"kata": {"runtime_path": "/usr/bin/kata"}}}}}


def test_docker_round_trip_and_user_edit(runtime_host, capsys):
    d, state = runtime_host
    cfg = d / "daemon.json"
    original = fx("docker", "daemon.json")
    cfg.write_bytes(original)
    crt(capsys, args_for(cfg, state, set_as_default=True, enable_cdi=True))
    assert json.loads(cfg.read_text())["default-runtime"] == "nvidia"
    res = crt(capsys, args_for(cfg, state, state="absent"))
    assert res["restored_files"] == [str(cfg)] and cfg.read_bytes() == original
    # user edit after present: runtimes.nvidia and default-runtime go, the edit stays
    crt(capsys, args_for(cfg, state, set_as_default=True))
    data = json.loads(cfg.read_text())
    data["log-level"] = "warn"
    cfg.write_text(json.dumps(data, indent=2) + "\n")
    res = crt(capsys, args_for(cfg, state, state="absent"))
    assert res["edited_files"] == [str(cfg)] and res["warnings"]
    expected = json.loads(original)
    expected["log-level"] = "warn"
    assert json.loads(cfg.read_text()) == expected


def test_docker_daemon_json_created_by_us_is_removed(runtime_host, capsys):
    d, state = runtime_host
    cfg = d / "daemon.json"
    crt(capsys, args_for(cfg, state, enable_cdi=True))
    res = crt(capsys, args_for(cfg, state, state="absent"))
    assert res["removed_files"] == [str(cfg)] and not cfg.exists()


# -- validation and restart on absent --------------------------------------------------------

class Listener(object):
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(16)

    def close(self):
        self.sock.close()


def script(path, body):
    path.write_text("#!/bin/sh\n" + body)
    os.chmod(path, 0o755)
    return str(path)


@pytest.fixture
def daemon(tmp_path):
    """Stand-ins for containerd (validation: prints the candidate), ctr (CRI ok) and a restart
    command that counts its calls and fails when told to."""
    bind = tmp_path / "bin"
    bind.mkdir()
    sock = str(tmp_path / "d.sock")
    lst = Listener(sock)
    log = tmp_path / "calls"
    binary = script(bind / "containerd", 'echo "validate $2" >> %s\ncat "$2"\n' % log)
    ctr = script(bind / "ctr", "echo 'TYPE ID PLATFORMS STATUS'\necho 'io.containerd.grpc.v1 cri linux/amd64 ok'\n")
    restart = script(bind / "restart", 'echo restart >> %s\n[ ! -e %s/fail-next ] || { rm %s/fail-next; exit 1; }\n'
                     % (log, tmp_path, tmp_path))
    yield dict(socket=sock, binary_path=binary, ctr_path=ctr, restart_mode="command", restart_command=[restart],
               restart_timeout=2, validate=True), log, tmp_path
    lst.close()


def calls(log):
    return log.read_text().split("\n") if log.exists() else []


def test_absent_validates_and_restarts_once(runtime_host, capsys, daemon):
    d, state = runtime_host
    dargs, log, _tmp = daemon
    cfg = d / "config.toml"
    original = fx("containerd", "v2-custom.toml")
    cfg.write_bytes(original)
    res = crt(capsys, dict(args_for(cfg, state), **dargs))
    assert res["restarted"] and res["validated"]
    log.unlink()
    res = crt(capsys, dict(args_for(cfg, state, state="absent"), **dargs))
    assert res["restarted"] and res["validated"] and cfg.read_bytes() == original
    assert [c.split()[0] for c in calls(log) if c] == ["validate", "restart"]
    log.unlink()
    res = crt(capsys, dict(args_for(cfg, state, state="absent"), **dargs))
    assert not res["changed"] and not res["restarted"] and calls(log) == []


def test_absent_restart_failure_restores_files_and_keeps_the_record(runtime_host, capsys, daemon):
    d, state = runtime_host
    dargs, log, tmp = daemon
    cfg = d / "config.toml"
    original = fx("containerd", "v3-custom.toml")
    cfg.write_bytes(original)
    dargs = dict(dargs, binary_path=None, validate=False)
    crt(capsys, dict(args_for(cfg, state), **dargs))
    written = cfg.read_bytes()
    (tmp / "fail-next").write_text("")
    rc, res = call(capsys, mod.main, dict(args_for(cfg, state, state="absent"), **dargs))
    assert res.get("failed") and res["restored"] is True and "restart command failed" in res["msg"]
    assert cfg.read_bytes() == written and len(records(state)) == 1     # back as before the absent run
    res = crt(capsys, dict(args_for(cfg, state, state="absent"), **dargs))
    assert res["restarted"] and cfg.read_bytes() == original and records(state) == []


def test_present_restart_failure_also_restores_the_record(runtime_host, capsys, daemon):
    d, state = runtime_host
    dargs, _log, tmp = daemon
    cfg = d / "config.toml"
    original = fx("containerd", "v3-custom.toml")
    cfg.write_bytes(original)
    (tmp / "fail-next").write_text("")
    rc, res = call(capsys, mod.main, dict(args_for(cfg, state), **dict(dargs, validate=False)))
    assert res.get("failed") and res["restored"] is True
    assert cfg.read_bytes() == original and records(state) == []


def test_record_store_refuses_a_corrupt_record(runtime_host, capsys):
    d, state = runtime_host
    cfg = d / "config.toml"
    cfg.write_text("version = 2\n")
    store = RecordStore(state)
    os.makedirs(state)
    with open(store.record_path(str(cfg)), "w") as f:
        f.write("{not json")
    rc, res = call(capsys, mod.main, args_for(cfg, state, state="absent"))
    assert res.get("failed") and "unreadable" in res["msg"] and cfg.read_text() == "version = 2\n"


def test_argument_spec_has_state_and_state_dir():
    spec = mod.argument_spec()
    assert spec["state"] == dict(type="str", default="present", choices=["present", "absent"])
    assert spec["state_dir"]["default"] == "/var/lib/gpuops/container_runtime"


# -- cdi_spec ----------------------------------------------------------------------------------

def test_cdi_spec_absent_removes_only_the_spec(tmp_path, capsys):
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    spec = cdi / "nvidia.yaml"
    spec.write_text("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n")
    other = cdi / "other.yaml"
    other.write_text("kind: example.com/x\n")
    rc, res = call(capsys, cdi_spec.main, {"path": str(spec), "state": "absent",
                                           "_ansible_check_mode": True, "_ansible_diff": True})
    assert res["changed"] and spec.exists()
    assert res["diff"][0]["before"].startswith("cdiVersion") and res["diff"][0]["after"] == ""
    rc, res = call(capsys, cdi_spec.main, {"path": str(spec), "state": "absent", "_ansible_diff": True})
    assert rc == 0 and res["changed"] and res["path"] == str(spec)
    assert not spec.exists() and other.exists() and cdi.is_dir()
    rc, res = call(capsys, cdi_spec.main, {"path": str(spec), "state": "absent"})
    assert rc == 0 and not res["changed"]


def test_cdi_spec_absent_refuses_a_directory(tmp_path, capsys):
    rc, res = call(capsys, cdi_spec.main, {"path": str(tmp_path), "state": "absent"})
    assert res.get("failed") and "directory" in res["msg"] and tmp_path.is_dir()
