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


def test_mig_configs():
    doc = {"version": "v1", "mig-configs": {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "all-1g.18gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 7}}]}}
    assert dp.validate_mig_configs(doc) == ["all-1g.18gb", "all-disabled"]
    bad = {"version": "v1", "mig-configs": {"x": [{"devices": "all", "mig-enabled": True}]}}
    with pytest.raises(dp.ConfigError, match="mig-devices is required"):
        dp.validate_mig_configs(bad)
    with pytest.raises(dp.ConfigError, match="version must be v1"):
        dp.validate_mig_configs({"version": "v2"})


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
