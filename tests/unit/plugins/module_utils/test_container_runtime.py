# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""Config transforms for containerd (v1-v4), CRI-O and Docker."""
from __future__ import annotations

import json
import os
import tomllib

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils._container_runtime import (
    RecordStore,
    RuntimeConfigError,
    configure_containerd,
    configure_crio,
    configure_docker,
    containerd_version,
    cri_plugin_failures,
    parse_ctr_plugins,
    plan,
    plan_absent,
    record_after_write,
    remove_containerd,
    remove_crio,
    remove_docker,
    sha256_of,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils._toml import Document

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "runtime")
BIN = "/usr/bin/nvidia-container-runtime"


def fx(*parts):
    with open(os.path.join(FIX, *parts)) as f:
        return f.read()


def params(**kw):
    p = dict(runtime="containerd", runtime_name="nvidia", runtime_path=BIN, set_as_default=False,
             enable_cdi=False, runtime_options={}, runtime_config={}, config_path="/etc/containerd/config.toml")
    p.update(kw)
    return p


def runtimes(text, plugin):
    return tomllib.loads(text)["plugins"][plugin]["containerd"]["runtimes"]


@pytest.mark.parametrize("text,version", [
    ("", 2), ("version = 2\n", 2), ("version = 3\n", 3), ("version = 4\n", 4),
    ("[plugins.cri.containerd]\nsnapshotter = \"overlayfs\"\n", 1), ("[grpc]\naddress = \"/x\"\n", 2),
])
def test_version_detection(text, version):
    assert containerd_version(Document(text)) == version


@pytest.mark.parametrize("bad", ["version = 9\n", "version = \"2\"\n", "version = true\n"])
def test_unsupported_version_is_refused(bad):
    with pytest.raises(RuntimeConfigError):
        configure_containerd(bad, params())


def test_empty_file_gets_version_2_and_runtime():
    main, drop, info = configure_containerd("", params(enable_cdi=True))
    data = tomllib.loads(main)
    assert data["version"] == 2 and drop is None and info["inherited_from"] is None
    cri = data["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["enable_cdi"] is True
    assert cri["containerd"]["runtimes"]["nvidia"] == {"runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": BIN}}


def test_v1_layout_uses_plugins_cri():
    text = "[plugins.cri.containerd.runtimes.runc]\nruntime_type = \"io.containerd.runc.v2\"\n"
    main, _ignored, info = configure_containerd(text, params())
    assert info["config_version"] == 1 and "version" not in tomllib.loads(main)
    assert runtimes(main, "cri")["nvidia"]["options"]["BinaryName"] == BIN


@pytest.mark.parametrize("name,plugin", [
    ("v2-default-1.6.toml", "io.containerd.grpc.v1.cri"),
    ("v2-custom.toml", "io.containerd.grpc.v1.cri"),
    ("v3-custom.toml", "io.containerd.cri.v1.runtime"),
    ("v4-default-2.4.toml", "io.containerd.cri.v1.runtime"),
])
def test_inherits_default_runtime_and_keeps_everything(name, plugin):
    text = fx("containerd", name)
    main, _ignored, info = configure_containerd(text, params(set_as_default=True))
    before, after = tomllib.loads(text), tomllib.loads(main)
    rts = after["plugins"][plugin]["containerd"]["runtimes"]
    assert info["inherited_from"] == "runc"
    for k, v in rts["runc"].items():
        if k != "options":
            assert rts["nvidia"][k] == v, k
    for k, v in rts["runc"].get("options", {}).items():
        if k != "BinaryName":
            assert rts["nvidia"]["options"][k] == v, k
    assert rts["nvidia"]["options"]["BinaryName"] == BIN
    assert after["plugins"][plugin]["containerd"]["default_runtime_name"] == "nvidia"
    # nothing else changed
    after["plugins"][plugin]["containerd"]["runtimes"].pop("nvidia")
    after["plugins"][plugin]["containerd"]["default_runtime_name"] = "runc"
    assert after == before
    # comments survive
    for line in text.splitlines():
        if line.strip().startswith("#"):
            assert line in main
    # idempotent
    again, _ignored, _ignored = configure_containerd(main, params(set_as_default=True))
    assert again == main


def test_existing_nvidia_settings_win_over_inherited_ones():
    text = fx("containerd", "v2-custom.toml") + (
        "\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]\n  SystemdCgroup = false\n")
    main, _ignored, _ignored = configure_containerd(text, params())
    assert runtimes(main, "io.containerd.grpc.v1.cri")["nvidia"]["options"] == {
        "SystemdCgroup": False, "BinaryName": BIN, "NoPivotRoot": False}


def test_unset_default_goes_back_to_runc():
    main, _ignored, _ignored = configure_containerd(fx("containerd", "v2-custom.toml"), params(set_as_default=True))
    main2, _ignored, _ignored = configure_containerd(main, params(set_as_default=False))
    assert tomllib.loads(main2)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["default_runtime_name"] == "runc"


def test_v3_does_not_write_enable_cdi():
    main, _ignored, _ignored = configure_containerd(fx("containerd", "v3-custom.toml"), params(enable_cdi=True))
    assert "enable_cdi" not in main


def test_drop_in_copies_cri_section_and_adds_import():
    text = fx("containerd", "v2-custom.toml")
    drop_path = "/etc/containerd/conf.d/99-nvidia.toml"
    main, drop, info = configure_containerd(text, params(drop_in_path=drop_path))
    assert tomllib.loads(main)["imports"] == [drop_path]
    main_data = tomllib.loads(main)
    main_data.pop("imports")
    assert main_data == tomllib.loads(text)           # main file: only imports added
    d = tomllib.loads(drop)
    cri = d["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == "registry.example.internal/pause:3.9"   # whole section copied
    assert cri["containerd"]["runtimes"]["nvidia"]["options"]["SystemdCgroup"] is True
    # a glob import that already covers the drop-in is kept as is
    globbed = "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n"
    main2, _ignored, _ignored = configure_containerd(globbed, params(drop_in_path=drop_path))
    assert tomllib.loads(main2)["imports"] == ["/etc/containerd/conf.d/*.toml"]


def test_drop_in_refused_for_v1_and_rancher_paths():
    with pytest.raises(RuntimeConfigError, match="version 2 or 3"):
        configure_containerd("[plugins.cri]\nx = 1\n", params(drop_in_path="/x.toml"))
    with pytest.raises(RuntimeConfigError, match="k3s/RKE2"):
        configure_containerd("", params(config_path="/var/lib/rancher/k3s/agent/etc/containerd/config.toml"))
    with pytest.raises(RuntimeConfigError, match="Go template"):
        configure_containerd('{{ template "base" . }}\n', params(config_path="/var/lib/rancher/rke2/agent/etc/containerd/config.toml.tmpl"))


def test_crio_drop_in():
    text = "# site\n[crio.runtime]\nlog_level = \"info\"\n"
    out, _ignored = configure_crio(text, params(runtime="crio", set_as_default=True))
    data = tomllib.loads(out)
    assert data["crio"]["runtime"]["runtimes"]["nvidia"] == {"runtime_path": BIN, "runtime_type": "oci"}
    assert data["crio"]["runtime"]["default_runtime"] == "nvidia"
    assert data["crio"]["runtime"]["log_level"] == "info" and "# site" in out
    out2, _ignored = configure_crio(out, params(runtime="crio", set_as_default=False))
    assert "default_runtime" not in tomllib.loads(out2)["crio"]["runtime"]


DOCKER_CASES = {
    "missing": (None, {"runtimes": {"nvidia": {"path": BIN, "args": []}}, "features": {"cdi": True}, "default-runtime": "nvidia"}),
    "keeps-keys": ('{"log-driver": "journald", "registry-mirrors": ["https://m"], "runtimes": {"runsc": {"path": "/usr/bin/runsc"}}}',
                   {"log-driver": "journald", "registry-mirrors": ["https://m"],
                    "runtimes": {"runsc": {"path": "/usr/bin/runsc"}, "nvidia": {"path": BIN, "args": []}},
                    "features": {"cdi": True}, "default-runtime": "nvidia"}),
    "keeps-args-and-features": ('{"runtimes": {"nvidia": {"path": "/old", "args": ["--debug"]}}, "features": {"buildkit": true}}',
                                {"runtimes": {"nvidia": {"path": BIN, "args": ["--debug"]}},
                                 "features": {"buildkit": True, "cdi": True}, "default-runtime": "nvidia"}),
}


@pytest.mark.parametrize("case", sorted(DOCKER_CASES))
def test_docker_merge(case):
    text, expected = DOCKER_CASES[case]
    out, _ignored = configure_docker(text, params(runtime="docker", set_as_default=True, enable_cdi=True))
    assert json.loads(out) == expected
    again, _ignored = configure_docker(out, params(runtime="docker", set_as_default=True, enable_cdi=True))
    assert again == out


def test_docker_untouched_text_when_nothing_to_do():
    text = '{\n  "runtimes": {"nvidia": {"path": "%s", "args": []}}\n}\n' % BIN
    out, _ignored = configure_docker(text, params(runtime="docker"))
    assert out == text


def test_docker_keeps_indent_and_removes_default_when_unset():
    text = '{\n  "default-runtime": "nvidia",\n  "runtimes": {"nvidia": {"path": "%s", "args": []}}\n}\n' % BIN
    out, _ignored = configure_docker(text, params(runtime="docker"))
    assert '\n  "runtimes"' in out and "default-runtime" not in out


@pytest.mark.parametrize("bad,msg", [("{", "not valid JSON"), ("[]", "JSON object"), ('{"runtimes": []}', "not an object")])
def test_docker_bad_input(bad, msg):
    with pytest.raises(RuntimeConfigError, match=msg):
        configure_docker(bad, params(runtime="docker"))


def test_plan_validates_input_before_reading():
    reads = []

    def read(path):
        reads.append(path)
        return ""
    for bad in (dict(runtime="podman"), dict(runtime_name="a b"), dict(runtime_path="relative/bin"),
                dict(runtime="docker", drop_in_path="/x")):
        with pytest.raises(RuntimeConfigError):
            plan(params(**bad), read)
    assert reads == []


def test_plan_comment_only_change_does_not_need_restart():
    text = "version = 2\n"
    changes, info = plan(params(), lambda p: text)
    assert info["effective_changed"]
    done = changes[0][2]
    changes, info = plan(params(), lambda p: "# note\n" + done)
    assert not info["effective_changed"]


CTR_TABLE = """TYPE                            ID                       PLATFORMS      STATUS
io.containerd.grpc.v1           cri                      linux/amd64    error
io.containerd.cri.v1            runtime                  linux/amd64    ok
"""
CTR_DETAIL = """Type:          io.containerd.grpc.v1
ID:            cri
Error:
               Code:        Unknown
               Message:     failed to create CRI service: boom
"""


def test_ctr_plugin_parsing():
    plugins = parse_ctr_plugins(CTR_TABLE, CTR_DETAIL)
    assert plugins[("io.containerd.cri.v1", "runtime")]["status"] == "ok"
    assert cri_plugin_failures(plugins) == ["io.containerd.grpc.v1.cri: failed to create CRI service: boom"]


# -- state=absent: surgical removal and the pristine records --------------------------------

@pytest.mark.parametrize("name,plugin", [
    ("v2-default-1.6.toml", "io.containerd.grpc.v1.cri"),
    ("v2-custom.toml", "io.containerd.grpc.v1.cri"),
    ("v3-custom.toml", "io.containerd.cri.v1.runtime"),
    ("v4-default-2.4.toml", "io.containerd.cri.v1.runtime"),
])
@pytest.mark.parametrize("pristine_known", [True, False])
def test_remove_containerd_undoes_configure(name, plugin, pristine_known):
    text = fx("containerd", name)
    main, _ignored, _ignored = configure_containerd(text, params(set_as_default=True))
    out = remove_containerd(main, "nvidia", text if pristine_known else None)
    assert tomllib.loads(out) == tomllib.loads(text)
    for line in text.splitlines():
        if line.strip().startswith("#"):
            assert line in out
    assert remove_containerd(out, "nvidia", text if pristine_known else None) == out      # nothing left of ours


def test_remove_containerd_keeps_a_pristine_nvidia_runtime():
    text = fx("containerd", "v2-custom.toml") + (
        '\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n  runtime_type = "io.containerd.runc.v2"\n')
    main, _ignored, _ignored = configure_containerd(text, params(set_as_default=True))
    assert runtimes(main, "io.containerd.grpc.v1.cri")["nvidia"]["options"]["BinaryName"] == BIN
    out = remove_containerd(main + "# edited\n", "nvidia", text)
    assert runtimes(out, "io.containerd.grpc.v1.cri")["nvidia"] == {"runtime_type": "io.containerd.runc.v2"}
    assert tomllib.loads(out)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["default_runtime_name"] == "runc"


def test_remove_containerd_v1_and_imports():
    text = "[plugins.cri.containerd.runtimes.runc]\nruntime_type = \"io.containerd.runc.v2\"\n"
    main, _ignored, _ignored = configure_containerd(text, params())
    assert tomllib.loads(remove_containerd(main, "nvidia")) == tomllib.loads(text)
    drop = "/etc/containerd/conf.d/99-nvidia.toml"
    assert "imports" not in tomllib.loads(remove_containerd('version = 2\nimports = ["%s"]\n' % drop, "nvidia", drop_in=drop))
    kept = remove_containerd('version = 2\nimports = ["/a.toml", "%s"]\n' % drop, "nvidia", drop_in=drop)
    assert tomllib.loads(kept)["imports"] == ["/a.toml"]
    # a glob that happens to match is not ours
    glob = 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
    assert remove_containerd(glob, "nvidia", drop_in=drop) == glob


def test_remove_crio_and_docker():
    site = "# site\n[crio.runtime]\nlog_level = \"info\"\n"
    out, _ignored = configure_crio(site, params(runtime="crio", set_as_default=True))
    assert remove_crio(out, "nvidia", site) == site
    text = fx("docker", "daemon.json")
    out, _ignored = configure_docker(text, params(runtime="docker", set_as_default=True))
    removed = remove_docker(out, "nvidia", None)
    assert json.loads(removed) == json.loads(text)
    assert remove_docker(text, "nvidia") == text                  # nothing of ours: text untouched
    assert "runtimes" not in json.loads(remove_docker('{"runtimes": {"nvidia": {"path": "/x"}}}', "nvidia", "{}"))
    with pytest.raises(RuntimeConfigError, match="not valid JSON"):
        remove_docker("{", "nvidia")


def test_record_keeps_the_first_pristine_and_notices_foreign_edits(tmp_path):
    path = str(tmp_path / "config.toml")
    rec = record_after_write(None, path, "containerd", "nvidia", b"orig\n", b"w1\n")
    assert rec["pristine_existed"] and rec["_pristine"] == b"orig\n" and rec["written_sha256"] == sha256_of(b"w1\n")
    rec2 = record_after_write(rec, path, "containerd", "nvidia", b"w1\n", b"w2\n")
    assert rec2["_pristine"] == b"orig\n" and not rec2["user_edited"] and rec2["written_sha256"] == sha256_of(b"w2\n")
    rec3 = record_after_write(rec2, path, "containerd", "other", b"user\n", b"w3\n")
    assert rec3["_pristine"] == b"orig\n" and rec3["user_edited"] and rec3["runtime_names"] == ["nvidia", "other"]
    # the pristine bytes are back (someone undid everything): the old record is stale
    rec4 = record_after_write(rec3, path, "containerd", "nvidia", b"orig\n", b"w4\n")
    assert not rec4["user_edited"] and rec4["runtime_names"] == ["nvidia"]
    store = RecordStore(str(tmp_path / "state"))
    store.save(path, rec3)
    loaded = store.load(path)
    assert loaded["_pristine"] == b"orig\n" and loaded["user_edited"] and "_pristine" not in json.loads(store.load_raw(path))
    assert os.path.basename(store.record_path(path)) == sha256_of(os.path.realpath(path).encode()) + ".json"


def test_plan_absent_restores_or_edits(tmp_path):
    path = "/etc/containerd/config.toml"
    text = fx("containerd", "v3-custom.toml").encode()
    written, _ignored, _ignored = configure_containerd(text.decode(), params())
    store = RecordStore(str(tmp_path))
    store.save(path, record_after_write(None, path, "containerd", "nvidia", text, written.encode()))
    changes, ops, info, warnings = plan_absent(params(), store, read=lambda p: written.encode())
    assert [c.after for c in changes] == [text] and info["restored_files"] == [path] and not warnings
    assert ops == [(path, None)] and info["effective_changed"]
    edited = (written + "# mine\n").encode()
    changes, ops, info, warnings = plan_absent(params(), store, read=lambda p: edited)
    assert info["edited_files"] == [path] and changes[0].after.endswith(b"# mine\n") and warnings
    assert info["effective_changed"] and tomllib.loads(changes[0].after.decode()) == tomllib.loads(text.decode())
    with pytest.raises(RuntimeConfigError, match="runtime_name"):
        plan_absent(params(runtime_name="a b"), store, read=lambda p: edited)
