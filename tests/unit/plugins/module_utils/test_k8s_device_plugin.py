"""Device plugin / MIG manager configs: validation as the plugin would, rendering."""
from __future__ import annotations

import json

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils import (
    _k8s_device_plugin as dp,
)


def ts(replicas, **extra):
    res = {"name": "nvidia.com/gpu", "replicas": replicas}
    res.update(extra)
    return {"version": "v1", "sharing": {"timeSlicing": {"resources": [res]}}}


def test_render_adds_default_and_strategy():
    data, warnings = dp.render({"ts": ts(4)}, mig_strategy="mixed")
    assert sorted(data) == ["default", "ts"]
    assert json.loads(data["default"]) == {"version": "v1", "flags": {"migStrategy": "mixed"}}
    assert json.loads(data["ts"])["sharing"]["timeSlicing"]["resources"][0]["replicas"] == 4
    assert warnings == []


def test_render_is_deterministic():
    assert dp.render({"b": ts(2), "a": ts(3)}) == dp.render({"a": ts(3), "b": ts(2)})


@pytest.mark.parametrize("cfg,match", [
    (ts(1), "replicas must be an integer >= 2, got 1"),
    (ts(0), ">= 2"),
    (ts("4"), ">= 2"),
    ({"version": "v2"}, "version must be v1"),
    ({"flags": {"migStrategy": "double"}}, "unknown MIG strategy 'double'"),
    ({"flags": {"migStrategy": "mixed"}, "sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}},
     "MPS sharing cannot be combined with migStrategy=mixed"),
    ({"sharing": {"timeSlicing": {"resources": []}}}, "at least one resource"),
    ({"sharing": {"timeslicing": {}}}, "unknown keys timeslicing"),
    ({"sharing": {"timeSlicing": {"resources": [{"name": "amd.com/gpu", "replicas": 2}]}}}, "name must be"),
    ({"flags": {"plugin": {"deviceListStrategy": "magic"}}}, "deviceListStrategy"),
])
def test_bad_configs_refused(cfg, match):
    with pytest.raises(dp.ConfigError, match=match):
        dp.render({"x": cfg})


def test_unknown_cluster_strategy_refused():
    with pytest.raises(dp.ConfigError, match="unknown MIG strategy"):
        dp.render({}, mig_strategy="auto")


def test_v020_limitations_warn():
    _data, warnings = dp.render({"x": ts(2, rename="gpu-shared", devices=[0, 1])})
    assert any("rename" in w for w in warnings) and any("devices" in w for w in warnings)


# --- strict sharing configs (k8s-device-plugin v0.20.0: api/config/v1/replicas.go, sharing.go, config.go,
# cmd/nvidia-device-plugin/main.go validateFlags, cmd/mps-control-daemon/mps/device.go) -------------------

GPU_UUID = "GPU-b1028956-cfa2-0990-bf4a-5da9abb51763"
MIG_UUID = "MIG-b1028956-cfa2-0990-bf4a-5da9abb51763"
MIG_GPU_UUID = "MIG-GPU-b1028956-cfa2-0990-bf4a-5da9abb51763/3/0"


def shared(kind, *resources, **spec):
    """A config with one sharing section of ``kind`` (timeSlicing or mps)."""
    spec = dict(spec, resources=list(resources))
    return {"version": "v1", "sharing": {kind: spec}}


def gpu(replicas=2, **extra):
    return dict({"name": "nvidia.com/gpu", "replicas": replicas}, **extra)


def refused(cfg, name="cfg"):
    with pytest.raises(dp.ConfigError) as e:
        dp.render({name: cfg}, mig_strategy="none")
    return e.value.errors


@pytest.mark.parametrize("kind", ["timeSlicing", "mps"])
@pytest.mark.parametrize("cfg_spec,expect", [
    ({"renameByDefault": "true"}, "sharing.{kind}.renameByDefault must be true or false, got 'true'"),
    ({"renameByDefault": 1}, "sharing.{kind}.renameByDefault must be true or false, got 1"),
    ({"renameByDefault": None}, "sharing.{kind}.renameByDefault must be true or false, got None"),
    ({"failRequestsGreaterThanOne": "yes"}, "sharing.{kind}.failRequestsGreaterThanOne must be true or false, got 'yes'"),
    ({"failRequestsGreaterThanOne": 0}, "sharing.{kind}.failRequestsGreaterThanOne must be true or false, got 0"),
])
def test_sharing_flags_must_be_booleans(kind, cfg_spec, expect):
    errors = refused(shared(kind, gpu(), **cfg_spec))
    assert errors == ["device plugin config 'cfg': " + expect.format(kind=kind)]


@pytest.mark.parametrize("kind", ["timeSlicing", "mps"])
def test_boolean_sharing_flags_accepted(kind):
    data, _warnings = dp.render({"cfg": shared(kind, gpu(), renameByDefault=True, failRequestsGreaterThanOne=True)})
    assert json.loads(data["cfg"])["sharing"][kind]["renameByDefault"] is True


@pytest.mark.parametrize("devices", [
    "all", 1, 3, [0], [0, 1, 7], ["0"], ["0:1", "1:0"], [GPU_UUID], [MIG_UUID], [MIG_GPU_UUID], [0, "1", GPU_UUID],
])
def test_devices_the_plugin_accepts(devices):
    data, warnings = dp.render({"cfg": shared("timeSlicing", gpu(4, devices=devices))})
    assert json.loads(data["cfg"])["sharing"]["timeSlicing"]["resources"][0].get("devices") == devices
    assert (devices == "all") == (not any("ignores non-'all' devices" in w for w in warnings))


@pytest.mark.parametrize("devices,expect", [
    ("some", ".devices must be 'all', a count of GPUs or a list"),
    (True, ".devices must be 'all', a count of GPUs or a list"),
    (1.5, ".devices must be 'all', a count of GPUs or a list"),
    ({"gpu": 0}, ".devices must be 'all', a count of GPUs or a list"),
    (0, ".devices: a count of GPUs must be at least 1, got 0"),
    (-2, ".devices: a count of GPUs must be at least 1, got -2"),
    ([], ".devices must not be an empty list"),
    ([-1], ".devices[0] must be a GPU index"),
    ([True], ".devices[0] must be a GPU index"),
    ([0, 1.0], ".devices[1] must be a GPU index"),
    (["gpu0"], ".devices[0] must be a GPU index"),
    (["0:1:2"], ".devices[0] must be a GPU index"),
    (["0:"], ".devices[0] must be a GPU index"),
    (["GPU-1234"], ".devices[0] must be a GPU index"),
    (["MIG-GPU-b1028956-cfa2-0990-bf4a-5da9abb51763/3"], ".devices[0] must be a GPU index"),
    (["all"], ".devices[0] must be a GPU index"),
    ([None], ".devices[0] must be a GPU index"),
    ([0, 0], ".devices[1]: 0 is listed twice"),
    ([1, "1"], ".devices[1]: '1' is listed twice"),
    ([GPU_UUID, GPU_UUID], ".devices[1]: '%s' is listed twice" % GPU_UUID),
])
def test_bad_devices_refused_with_config_and_key(devices, expect):
    errors = refused(shared("timeSlicing", gpu(4, devices=devices)))
    assert len(errors) == 1, errors
    assert errors[0].startswith("device plugin config 'cfg': sharing.timeSlicing.resources[0]" + expect), errors


def test_duplicate_resource_names_in_one_section_refused():
    errors = refused(shared("timeSlicing", gpu(4), {"name": "nvidia.com/mig-1g.18gb", "replicas": 2}, gpu(8)))
    assert errors == ["device plugin config 'cfg': sharing.timeSlicing.resources[2].name: 'nvidia.com/gpu' is already "
                      "listed in sharing.timeSlicing.resources[0] (the plugin would replicate it twice, GFD would label "
                      "only the first entry)"]


def test_same_resource_in_two_configs_is_fine():
    data, _warnings = dp.render({"a": shared("timeSlicing", gpu(4)), "b": shared("timeSlicing", gpu(8))})
    assert sorted(data) == ["a", "b", "default"]


@pytest.mark.parametrize("name,expect", [
    ("gpu", "must be fully qualified (nvidia.com/gpu or nvidia.com/mig-<profile>)"),
    ("amd.com/gpu", "must be fully qualified (nvidia.com/gpu or nvidia.com/mig-<profile>)"),
    (5, "must be a resource name (a string)"),
    (None, "must be a resource name (a string)"),
    ("nvidia.com/GPU", "must be nvidia.com/ followed by lower-case letters, digits, '-' and '.'"),
    ("nvidia.com/mig-", "must be nvidia.com/ followed by lower-case letters, digits, '-' and '.'"),
    ("nvidia.com/mig-1g.18gb+me", "must be nvidia.com/ followed by lower-case letters, digits, '-' and '.'"),
    ("nvidia.com/mig-" + "1" * 50, "must be at most 63 characters with its nvidia.com/ prefix"),
    ("nvidia.com/gpu.shared", "must be nvidia.com/gpu or nvidia.com/mig-<profile>"),
])
def test_resource_names(name, expect):
    errors = refused(shared("timeSlicing", {"name": name, "replicas": 2}))
    assert errors == ["device plugin config 'cfg': sharing.timeSlicing.resources[0].name %s, got %r" % (expect, name)]


@pytest.mark.parametrize("rename,expect", [
    ("", "must be nvidia.com/ followed by lower-case letters, digits, '-' and '.'"),
    (["nvidia.com/x"], "must be a resource name (a string)"),
    ("nvidia.com/Shared", "must be nvidia.com/ followed by lower-case letters, digits, '-' and '.'"),
    ("shared_gpu", "must be nvidia.com/ followed by lower-case letters, digits, '-' and '.'"),
    ("s" * 53, "must be at most 63 characters with its nvidia.com/ prefix"),
])
def test_rename_must_be_a_resource_name(rename, expect):
    """The plugin parses rename before it drops it (v0.20): a bad one stops it; a bare name gets nvidia.com/."""
    errors = refused(shared("timeSlicing", gpu(2, rename=rename)))
    assert errors == ["device plugin config 'cfg': sharing.timeSlicing.resources[0].rename %s, got %r" % (expect, rename)]
    _data, warnings = dp.render({"cfg": shared("timeSlicing", gpu(2, rename="s" * 52))})
    assert warnings == ["device plugin config 'cfg': sharing.timeSlicing.resources[0]: device plugin v0.20 ignores "
                        "per-resource rename; use renameByDefault"]


def test_both_time_slicing_and_mps_refused():
    cfg = {"version": "v1", "sharing": {"timeSlicing": {"resources": [gpu(4)]}, "mps": {"resources": [gpu(2)]}}}
    errors = refused(cfg)
    assert errors == ["device plugin config 'cfg': sharing.timeSlicing and sharing.mps are both set; the plugin uses "
                      "only sharing.mps and ignores sharing.timeSlicing without a word -- keep one of them"]
    # a null section is no section (the plugin's pointer stays nil)
    data, _warnings = dp.render({"ok": {"version": "v1", "sharing": {"timeSlicing": None, "mps": {"resources": [gpu(2)]}}}},
                                mig_strategy="none")
    assert "ok" in data


@pytest.mark.parametrize("replicas,ok", [(2, True), (16, True), (17, True), (48, True), (49, False), (1000, False)])
def test_mps_replicas_limit(replicas, ok):
    cfg = shared("mps", gpu(replicas))
    if ok:
        dp.render({"cfg": cfg}, mig_strategy="none")
        return
    assert refused(cfg) == ["device plugin config 'cfg': sharing.mps.resources[0].replicas: MPS allows at most 48 "
                            "clients per GPU (16 before compute capability 7.5); the plugin's MPS control daemon "
                            "refuses %d" % replicas]


def test_time_slicing_has_no_replica_limit():
    data, _warnings = dp.render({"cfg": shared("timeSlicing", gpu(1000))})
    assert json.loads(data["cfg"])["sharing"]["timeSlicing"]["resources"][0]["replicas"] == 1000


@pytest.mark.parametrize("replicas", [2.0, "2", None, True])
def test_replicas_must_be_integers(replicas):
    errors = refused(shared("mps", gpu(replicas)))
    assert errors == ["device plugin config 'cfg': sharing.mps.resources[0].replicas must be an integer >= 2, got %r" % replicas]


def test_mps_on_mig_resources_and_mig_devices_refused():
    errors = refused(shared("mps", {"name": "nvidia.com/mig-1g.18gb", "replicas": 2}))
    assert errors == ["device plugin config 'cfg': sharing.mps.resources[0].name: 'nvidia.com/mig-1g.18gb' is a MIG "
                      "resource; MPS sharing is not supported for MIG devices (and nvidia.com/mig-* resources exist only "
                      "with migStrategy=mixed, which MPS refuses)"]
    errors = refused(shared("mps", gpu(2, devices=[0, "0:1", MIG_GPU_UUID])))
    assert errors == [
        "device plugin config 'cfg': sharing.mps.resources[0].devices[1]: '0:1' is a MIG device; MPS sharing is not "
        "supported for MIG devices (the plugin refuses it)",
        "device plugin config 'cfg': sharing.mps.resources[0].devices[2]: '%s' is a MIG device; MPS sharing is not "
        "supported for MIG devices (the plugin refuses it)" % MIG_GPU_UUID]
    # time-slicing of MIG devices is what the plugin does with migStrategy=mixed
    dp.render({"ts": shared("timeSlicing", {"name": "nvidia.com/mig-1g.18gb", "replicas": 2, "devices": ["0:1"]})},
              mig_strategy="mixed")


@pytest.mark.parametrize("cluster,flags,ok", [
    ("mixed", None, False), ("single", {"migStrategy": "mixed"}, False),
    ("mixed", {"migStrategy": "single"}, True), ("none", None, True), ("single", None, True),
])
def test_mps_with_mixed_strategy_refused(cluster, flags, ok):
    cfg = {"version": "v1", "sharing": {"mps": {"resources": [gpu(2)]}}}
    if flags:
        cfg["flags"] = flags
    if ok:
        dp.render({"cfg": cfg}, mig_strategy=cluster)
        return
    with pytest.raises(dp.ConfigError) as e:
        dp.render({"cfg": cfg}, mig_strategy=cluster)
    assert e.value.errors == ["device plugin config 'cfg': MPS sharing cannot be combined with migStrategy=mixed "
                              "(sharing.mps with flags.migStrategy mixed: the plugin refuses to start)"]


def test_mps_fail_requests_false_is_honoured_by_v020_and_warned_about():
    """v0.20.0 (f14d3d12d) keeps an explicit failRequestsGreaterThanOne: false for MPS; earlier releases forced
    true.  Accepted, with a warning that says what a multi-replica request really gets."""
    data, warnings = dp.render({"cfg": shared("mps", gpu(4), failRequestsGreaterThanOne=False)}, mig_strategy="none")
    assert json.loads(data["cfg"])["sharing"]["mps"]["failRequestsGreaterThanOne"] is False
    assert len(warnings) == 1 and warnings[0].startswith(
        "device plugin config 'cfg': sharing.mps.failRequestsGreaterThanOne is false: a container may request more "
        "than one MPS replica")
    assert "before v0.20.0" in warnings[0]
    for spec in ({"failRequestsGreaterThanOne": True}, {}):
        assert dp.render({"cfg": shared("mps", gpu(4), **spec)}, mig_strategy="none")[1] == []
    # time-slicing: false is the plugin's default, nothing to say
    assert dp.render({"cfg": shared("timeSlicing", gpu(4), failRequestsGreaterThanOne=False)})[1] == []


@pytest.mark.parametrize("root,ok", [("/run/nvidia/mps", True), ("run/mps", False), ("", False), (5, False)])
def test_mps_root_flag(root, ok):
    cfg = dict(shared("mps", gpu(2)), flags={"migStrategy": "none", "mpsRoot": root})
    if ok:
        dp.render({"cfg": cfg})
    else:
        assert refused(cfg) == ["device plugin config 'cfg': flags.mpsRoot must be an absolute path, got %r" % (root,)]


def test_every_problem_of_a_config_is_listed_at_once():
    cfg = {"version": "v1", "sharing": {"mps": {"renameByDefault": "no", "resources": [
        gpu(1), gpu(60, devices=["x"]), {"name": "nvidia.com/gpu", "replicas": 2, "extra": 1}]}}}
    errors = refused(cfg)
    assert errors == [
        "device plugin config 'cfg': sharing.mps.renameByDefault must be true or false, got 'no'",
        "device plugin config 'cfg': sharing.mps.resources[0].replicas must be an integer >= 2, got 1",
        "device plugin config 'cfg': sharing.mps.resources[1].name: 'nvidia.com/gpu' is already listed in "
        "sharing.mps.resources[0] (the plugin would replicate it twice, GFD would label only the first entry)",
        "device plugin config 'cfg': sharing.mps.resources[1].replicas: MPS allows at most 48 clients per GPU (16 before "
        "compute capability 7.5); the plugin's MPS control daemon refuses 60",
        "device plugin config 'cfg': sharing.mps.resources[1].devices[0] must be a GPU index (0, 1, ...), a '<gpu>:<mig>' "
        "index, a GPU-<uuid> or a MIG-<uuid>, got 'x'",
        "device plugin config 'cfg': sharing.mps.resources[2]: unknown keys extra",
        "device plugin config 'cfg': sharing.mps.resources[2].name: 'nvidia.com/gpu' is already listed in "
        "sharing.mps.resources[0] (the plugin would replicate it twice, GFD would label only the first entry)",
    ]


def test_vgpu_configs_valid():
    doc = {"version": "v1", "vgpu-configs": {"default": [{"devices": "all", "vgpu-devices": {"A10-4Q": 6}}],
                                             "split": [{"devices": [0, 1], "vgpu-devices": {"A10-2Q": 12}}]}}
    assert dp.validate_vgpu_configs(doc) == ["default", "split"]


@pytest.mark.parametrize("doc, expect", [
    ({"version": "v2", "vgpu-configs": {}}, "version must be v1"),
    ({"version": "v1", "vgpu-configs": {}}, "vgpu-configs must map config names"),
    ({"version": "v1", "vgpu-configs": {"default": []}}, "'default': needs at least one entry"),
    ({"version": "v1", "vgpu-configs": {"default": [{"devices": "some", "vgpu-devices": {}}]}}, "devices must be 'all'"),
    ({"version": "v1", "vgpu-configs": {"default": [{"devices": "all", "vgpu-devices": {"A10-4Q": True}}]}},
     "must be an integer >= 1, got True"),
    ({"version": "v1", "vgpu-configs": {"default": [{"devices": "all", "vgpu-devices": {}, "mig": 1}]}}, "unknown keys mig"),
    ({"version": "v1", "vgpu-configs": {"other": [{"devices": "all", "vgpu-devices": {}}]}},
     "default config 'default' is not defined"),
])
def test_vgpu_configs_refused(doc, expect):
    with pytest.raises(dp.ConfigError) as e:
        dp.validate_vgpu_configs(doc)
    assert expect in str(e.value)


@pytest.mark.parametrize("flag, cluster, warned", [("none", "single", True), ("single", "single", False),
                                                   ("mixed", "none", True), (None, "single", False)])
def test_a_config_mig_strategy_the_pods_env_overrides_is_warned_about(flag, cluster, warned):
    """The pods' MIG_STRATEGY (the cluster's strategy) is a set flag: it beats the config file's flags.migStrategy
    in the plugin and GFD (seen on the GPU: a config saying none, GFD labelled nvidia.com/mig.strategy=single)."""
    cfg = {"version": "v1", "flags": {} if flag is None else {"migStrategy": flag}}
    warnings = dp.render({"cfg": cfg}, mig_strategy=cluster)[1]
    hits = [w for w in warnings if "flags.migStrategy" in w]
    assert bool(hits) is warned
    if warned:
        assert hits == ["device plugin config 'cfg': flags.migStrategy %s is overridden by the pods' MIG_STRATEGY %s "
                        "(gpuops_mig_strategy): the device plugin and GFD run with %s; set gpuops_mig_strategy "
                        "instead, or drop the flag" % (flag, cluster, cluster)]
