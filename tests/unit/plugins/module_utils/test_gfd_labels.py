"""GFD (k8s-device-plugin v0.17.x) label rules: gpu.machine, mps.capable, vgpu.present,
sharing configs, and the full label set of the real H200 node."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils import _gpu_facts, _labels
from conftest import REPO, needs

COMPARE = os.path.join(REPO, "tests", "lab", "gpu", "compare_labels.py")

# Config spaces of NVIDIA's own vGPU tests (k8s-device-plugin v0.17.4 internal/vgpu/pciutil.go,
# NewMockNvidiaPCI): a passthrough GPU and a vGPU guest with host driver 460.16 / r460_00.
PASSTHROUGH_CONFIG = bytes.fromhex(
    "de108a1107041000a100000300f80000000000ec0c0000e0000000000c0000ea0000000001c1000000000000de101410000000ee"
    "600000000000000005010000de1014100000000000000000000000000100000001000000ced62300000000000168030008000000"
    "057881000070e6fe000000000043000010b40200e18d640010290000033d45100000011100000000000000000000000000000000"
    "13000000000000000e00000003003e00000000000000000009001401000000000000000000000000000000000000000000000000"
    "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000")
VGPU_CONFIG = bytes.fromhex(
    "de10b81e0205ff06a100000300000000000000fc0c0000d000000000040000fa000000000000000000000000de100f1300000000"
    "d0000000000000000a010000000000000000000000000000000000000100000001000000ced62300000000000000000000000000"
    "050081000000e0fe000000004e400000000000000000000000000000000000000000000000000000000000000000000000000000"
    "00000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "09681b564600163436302e313600000000723436305f3030000000000000000000000000000000000000000000000000")

H200_BDF = "0000:00:06.0"

#: What NVIDIA's GFD wrote on the real H200 node (25 nvidia.com/* labels besides gfd.timestamp;
#: no DMI there, MIG disabled, no sharing config, migStrategy none) -- the 22 that already
#: matched plus the three added here, with the node's values.
H200_GFD = {
    "nvidia.com/cuda.driver-version.full": "580.159.04",
    "nvidia.com/cuda.driver-version.major": "580",
    "nvidia.com/cuda.driver-version.minor": "159",
    "nvidia.com/cuda.driver-version.revision": "04",
    "nvidia.com/cuda.driver.major": "580",
    "nvidia.com/cuda.driver.minor": "159",
    "nvidia.com/cuda.driver.rev": "04",
    "nvidia.com/cuda.runtime-version.full": "13.0",
    "nvidia.com/cuda.runtime-version.major": "13",
    "nvidia.com/cuda.runtime-version.minor": "0",
    "nvidia.com/cuda.runtime.major": "13",
    "nvidia.com/cuda.runtime.minor": "0",
    "nvidia.com/gpu.compute.major": "9",
    "nvidia.com/gpu.compute.minor": "0",
    "nvidia.com/gpu.count": "1",
    "nvidia.com/gpu.family": "hopper",
    "nvidia.com/gpu.machine": "unknown",
    "nvidia.com/gpu.memory": "143771",
    "nvidia.com/gpu.mode": "compute",
    "nvidia.com/gpu.product": "NVIDIA-H200",
    "nvidia.com/gpu.replicas": "1",
    "nvidia.com/gpu.sharing-strategy": "none",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mps.capable": "false",
    "nvidia.com/vgpu.present": "false",
}

TS4 = {"version": "v1", "sharing": {"timeSlicing": {"renameByDefault": False, "resources": [
    {"name": "nvidia.com/gpu", "replicas": 4}]}}}


def gather(root, subsets=_gpu_facts.SUBSETS, nvml=None, gfd_config=None):
    def no_nvml():
        return None, "pynvml is not importable (test)"

    return _gpu_facts.gather(root, subsets, nvml_lib=nvml, load_nvml=no_nvml, gfd_config=gfd_config)


def h200_gpu(**extra):
    gpu = {"product": "NVIDIA H200", "memory_mib": 143771, "compute_capability": "9.0",
           "mig_capable": True, "mig_enabled": False, "class_id": "030200"}
    gpu.update(extra)
    return gpu


def nvidia_labels(labels):
    return {k: v for k, v in labels.items() if k.startswith("nvidia.com/")}


def copy_root(src, dst):
    import shutil

    shutil.copytree(src, dst, symlinks=True)
    return str(dst)


class TestH200Replay:
    def test_missing_labels_on_replay_root(self, roots, h200_nvml):
        facts, warnings = gather(roots["h200"], nvml=h200_nvml)
        assert warnings == []
        labels = facts["labels"]
        assert labels["nvidia.com/gpu.machine"] == "unknown"  # no /sys/class/dmi/id in the capture
        assert labels["nvidia.com/mps.capable"] == "false"
        assert labels["nvidia.com/vgpu.present"] == "false"
        assert "nvidia.com/vgpu.host-driver-version" not in labels
        assert any("vgpu.present" in n and H200_BDF in n for n in facts["notes"])

    def test_every_gfd_label_of_the_real_node(self, roots, h200_nvml):
        facts, _warnings = gather(roots["h200"], nvml=h200_nvml)
        ours = nvidia_labels(facts["labels"])
        assert {k: ours.get(k) for k in H200_GFD} == H200_GFD
        # the one extra: the GPU Operator's label (NFD rule), not GFD's
        assert set(ours) - set(H200_GFD) == {"nvidia.com/gpu.present"}

    def test_config_space_read_as_root_decides(self, roots, h200_nvml, tmp_path):
        root = copy_root(roots["h200"], tmp_path / "h200")
        dev = os.path.join(root, "sys/bus/pci/devices", H200_BDF)
        with open(os.path.join(dev, "config"), "wb") as f:
            f.write(PASSTHROUGH_CONFIG)
        facts, _warnings = gather(root, nvml=h200_nvml)
        assert facts["labels"]["nvidia.com/vgpu.present"] == "false"
        assert not any("vgpu" in n for n in facts["notes"])
        with open(os.path.join(dev, "config"), "wb") as f:
            f.write(VGPU_CONFIG)
        facts, _warnings = gather(root, nvml=h200_nvml)
        assert facts["labels"]["nvidia.com/vgpu.present"] == "true"
        assert facts["labels"]["nvidia.com/vgpu.host-driver-version"] == "460.16"
        assert facts["labels"]["nvidia.com/vgpu.host-driver-branch"] == "r460_00"

    def test_unprivileged_config_read_leaves_vgpu_out(self, roots, h200_nvml, tmp_path):
        # GFD: "entire PCI configuration is not read" -> vGPU labeler logs and writes nothing
        root = copy_root(roots["h200"], tmp_path / "h200")
        with open(os.path.join(root, "sys/bus/pci/devices", H200_BDF, "config"), "wb") as f:
            f.write(PASSTHROUGH_CONFIG[:64])
        facts, _warnings = gather(root, nvml=h200_nvml)
        assert "nvidia.com/vgpu.present" not in facts["labels"]
        assert any("64 bytes" in n for n in facts["notes"])

    def test_dmi_product_name_under_root(self, roots, h200_nvml, tmp_path):
        root = copy_root(roots["h200"], tmp_path / "h200")
        os.makedirs(os.path.join(root, "sys/class/dmi/id"))
        with open(os.path.join(root, "sys/class/dmi/id/product_name"), "w") as f:
            f.write("  ProLiant XL675d  Gen10 Plus (A)\n")
        facts, _warnings = gather(root, nvml=h200_nvml)
        assert facts["machine"] == "ProLiant XL675d  Gen10 Plus (A)"
        assert facts["labels"]["nvidia.com/gpu.machine"] == "ProLiant-XL675d-Gen10-Plus-A"

    def test_synthetic_root_with_dmi(self, roots):
        facts, _warnings = gather(roots["hgx-h100"])
        assert facts["labels"]["nvidia.com/gpu.machine"] == "DGX-H100"

    def test_no_gpu_no_gfd_labels(self, roots):
        facts, _warnings = gather(roots["no-gpu"])
        assert nvidia_labels(facts["labels"]) == {}


class TestMachineType:
    @pytest.mark.parametrize("raw,label", [
        ("DGX H100", "DGX-H100"),
        ("PowerEdge XE9680", "PowerEdge-XE9680"),
        ("  Standard PC (Q35 + ICH9, 2009)\n", "Standard-PC-Q35-ICH9-2009"),
        ("HGX\tH200  8-GPU", "HGXH200-8-GPU"),  # tab dropped (not in GFD's class), double space collapsed
        ("Virtual_Machine v1.2", "Virtual_Machine-v1.2"),
        ("", ""),  # an empty product_name file: GFD writes an empty value
    ])
    def test_sanitised_as_gfd(self, raw, label):
        labels = _labels.gfd_labels([h200_gpu()], machine=_labels.machine_type(raw))
        assert labels["nvidia.com/gpu.machine"] == label

    def test_unreadable_is_unknown(self):
        assert _labels.machine_type(None) == "unknown"
        assert _labels.gfd_labels([h200_gpu()], machine=_labels.machine_type(None))["nvidia.com/gpu.machine"] == "unknown"

    def test_caller_without_machine_leaves_it_out(self):
        assert "nvidia.com/gpu.machine" not in _labels.gfd_labels([h200_gpu()])

    def test_sanitise_collapses_spaces_like_strings_fields(self):
        assert _labels.sanitise(" NVIDIA  A100 ") == "NVIDIA-A100"
        assert _labels.sanitise("Tesla (T4)!") == "Tesla-T4"


class TestSharing:
    def test_no_config(self):
        labels = _labels.gfd_labels([h200_gpu()])
        assert (labels["nvidia.com/gpu.replicas"], labels["nvidia.com/gpu.sharing-strategy"],
                labels["nvidia.com/gpu.product"], labels["nvidia.com/mps.capable"]) == ("1", "none", "NVIDIA-H200", "false")
        assert "nvidia.com/mig.strategy" not in labels

    def test_time_slicing_four_replicas(self):
        none = _labels.gfd_labels([h200_gpu()], "580.159.04", "13.0", "unknown", vgpu=[])
        shared = _labels.gfd_labels([h200_gpu()], "580.159.04", "13.0", "unknown", config=TS4, vgpu=[])
        assert shared["nvidia.com/gpu.replicas"] == "4"
        assert shared["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
        assert shared["nvidia.com/gpu.product"] == "NVIDIA-H200-SHARED"
        assert shared["nvidia.com/mps.capable"] == "false"
        changed = {k for k in none if none[k] != shared.get(k)} | (set(shared) - set(none))
        assert changed == {"nvidia.com/gpu.replicas", "nvidia.com/gpu.sharing-strategy", "nvidia.com/gpu.product"}

    def test_time_slicing_on_the_h200_replay(self, roots, h200_nvml):
        plain, _warnings = gather(roots["h200"], nvml=h200_nvml)
        shared, _warnings = gather(roots["h200"], nvml=h200_nvml, gfd_config=TS4)
        expected = dict(H200_GFD, **{"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing",
                                     "nvidia.com/gpu.product": "NVIDIA-H200-SHARED"})
        assert {k: shared["labels"].get(k) for k in expected} == expected
        assert {k: plain["labels"].get(k) for k in H200_GFD} == H200_GFD

    def test_sharing_section_alone_is_accepted(self):
        labels = _labels.gfd_labels([h200_gpu()], config=TS4["sharing"])
        assert labels["nvidia.com/gpu.replicas"] == "4"

    def test_rename_by_default_keeps_product(self):
        cfg = {"sharing": {"timeSlicing": {"renameByDefault": True, "resources": [
            {"name": "nvidia.com/gpu", "replicas": 4}]}}}
        labels = _labels.gfd_labels([h200_gpu()], config=cfg)
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-H200"
        assert labels["nvidia.com/gpu.replicas"] == "4"
        assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"

    def test_per_resource_rename_is_ignored_as_gfd_does(self):
        # DisableResourceNamingInConfig drops a rename without renameByDefault: product still -SHARED
        cfg = {"sharing": {"timeSlicing": {"resources": [
            {"name": "nvidia.com/gpu", "rename": "nvidia.com/shared-gpu", "replicas": 2}]}}}
        assert _labels.gfd_labels([h200_gpu()], config=cfg)["nvidia.com/gpu.product"] == "NVIDIA-H200-SHARED"

    def test_mps(self):
        cfg = {"sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 3}]}}}
        labels = _labels.gfd_labels([h200_gpu()], config=cfg)
        assert labels["nvidia.com/mps.capable"] == "true"
        assert labels["nvidia.com/gpu.sharing-strategy"] == "mps"
        assert labels["nvidia.com/gpu.replicas"] == "3"
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-H200-SHARED"

    def test_mps_section_wins_over_time_slicing(self):
        cfg = {"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]},
                           "mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}
        labels = _labels.gfd_labels([h200_gpu()], config=cfg)
        assert (labels["nvidia.com/gpu.sharing-strategy"], labels["nvidia.com/gpu.replicas"]) == ("mps", "2")

    def test_mps_with_mig_enabled_is_what_gfd_fails_on(self):
        cfg = {"sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}
        with pytest.raises(_labels.GFDConfigError, match="MPS sharing is not supported"):
            _labels.gfd_labels([h200_gpu(mig_enabled=True)], config=cfg)

    # -- MPS label sets, as GFD v0.17.4-v0.20.0 writes them (internal/lm/nvml.go newSharingLabeler,
    # internal/lm/resource.go baseLabeler/getProductName, api/config/v1/sharing.go) -----------------

    MPS_H200_4 = {"nvidia.com/mps.capable": "true", "nvidia.com/gpu.replicas": "4",
                  "nvidia.com/gpu.sharing-strategy": "mps", "nvidia.com/gpu.product": "NVIDIA-H200-SHARED",
                  "nvidia.com/gpu.count": "1"}

    def test_mps_label_set_on_the_h200_replay(self, roots, h200_nvml):
        cfg = {"version": "v1", "flags": {"migStrategy": "none"},
               "sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}
        shared, _warnings = gather(roots["h200"], nvml=h200_nvml, gfd_config=cfg)
        expected = dict(H200_GFD, **self.MPS_H200_4)
        assert {k: shared["labels"].get(k) for k in expected} == expected
        assert "nvidia.com/mig.strategy" not in shared["labels"]

    def test_mps_with_rename_by_default_keeps_the_product(self):
        cfg = {"sharing": {"mps": {"renameByDefault": True, "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}
        labels = _labels.gfd_labels([h200_gpu()], config=cfg)
        assert {k: labels[k] for k in self.MPS_H200_4} == dict(self.MPS_H200_4, **{"nvidia.com/gpu.product": "NVIDIA-H200"})

    def test_mps_on_two_gpus_counts_gpus_not_replicas(self):
        cfg = {"sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 3}]}}}
        labels = _labels.gfd_labels([h200_gpu(), h200_gpu()], config=cfg)
        assert (labels["nvidia.com/gpu.count"], labels["nvidia.com/gpu.replicas"]) == ("2", "3")

    def test_mps_with_single_strategy_and_mig_disabled(self):
        cfg = {"flags": {"migStrategy": "single"}, "sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}
        labels = _labels.gfd_labels([h200_gpu()], config=cfg)
        assert (labels["nvidia.com/mps.capable"], labels["nvidia.com/mig.strategy"],
                labels["nvidia.com/gpu.sharing-strategy"]) == ("true", "single", "mps")

    def test_mps_section_for_another_resource_still_makes_the_node_mps_capable(self):
        # SharingStrategy() is mps (a replicated resource exists); nvidia.com/gpu itself is not shared
        cfg = {"sharing": {"mps": {"resources": [{"name": "nvidia.com/mig-1g.18gb", "replicas": 2}]}}}
        labels = _labels.gfd_labels([h200_gpu()], config=cfg)
        assert (labels["nvidia.com/mps.capable"], labels["nvidia.com/gpu.replicas"],
                labels["nvidia.com/gpu.sharing-strategy"], labels["nvidia.com/gpu.product"]) == ("true", "1", "none", "NVIDIA-H200")

    def test_mps_section_wins_even_when_time_slicing_names_the_gpu(self):
        # ReplicatedResources() is the mps section when there is one: the time-slicing entry is not consulted
        cfg = {"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]},
                           "mps": {"resources": [{"name": "nvidia.com/mig-1g.18gb", "replicas": 2}]}}}
        labels = _labels.gfd_labels([h200_gpu()], config=cfg)
        assert (labels["nvidia.com/mps.capable"], labels["nvidia.com/gpu.replicas"],
                labels["nvidia.com/gpu.sharing-strategy"]) == ("true", "1", "none")

    @pytest.mark.parametrize("kind,strategy", [("mps", "mps"), ("timeSlicing", "time-slicing")])
    def test_bare_resource_name_is_nvidia_com(self, kind, strategy):
        # the plugin's ResourceName prefixes nvidia.com/ (api/config/v1/resources.go NewResourceName)
        cfg = {"sharing": {kind: {"resources": [{"name": "gpu", "replicas": 3}]}}}
        labels = _labels.gfd_labels([h200_gpu()], config=cfg)
        assert (labels["nvidia.com/gpu.replicas"], labels["nvidia.com/gpu.sharing-strategy"],
                labels["nvidia.com/gpu.product"]) == ("3", strategy, "NVIDIA-H200-SHARED")

    @pytest.mark.parametrize("flag,value", [("renameByDefault", "false"), ("renameByDefault", 1),
                                            ("failRequestsGreaterThanOne", "true"), ("failRequestsGreaterThanOne", 0)])
    def test_non_boolean_sharing_flags_are_what_gfd_fails_on(self, flag, value):
        # a JSON bool in GFD's struct: "false" as a string fails the whole config (GFD writes no labels)
        cfg = {"sharing": {"mps": {flag: value, "resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}
        with pytest.raises(_labels.GFDConfigError, match="sharing.mps.%s must be true or false" % flag):
            _labels.gfd_labels([h200_gpu()], config=cfg)

    def test_null_sharing_flags_are_the_defaults(self):
        # JSON null into a Go bool / *bool is no error and leaves the default (false, unset)
        cfg = {"sharing": {"mps": {"renameByDefault": None, "failRequestsGreaterThanOne": None,
                                   "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}
        labels = _labels.gfd_labels([h200_gpu()], config=cfg)
        assert {k: labels[k] for k in self.MPS_H200_4} == self.MPS_H200_4

    def test_resource_name_must_be_a_string(self):
        cfg = {"sharing": {"mps": {"resources": [{"name": 7, "replicas": 2}]}}}
        with pytest.raises(_labels.GFDConfigError, match="resource name must be a string"):
            _labels.gfd_labels([h200_gpu()], config=cfg)

    def test_other_resource_replicated_leaves_gpu_alone(self):
        cfg = {"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/mig-1g.18gb", "replicas": 2}]}}}
        labels = _labels.gfd_labels([h200_gpu()], config=cfg)
        assert (labels["nvidia.com/gpu.replicas"], labels["nvidia.com/gpu.sharing-strategy"],
                labels["nvidia.com/gpu.product"]) == ("1", "none", "NVIDIA-H200")

    @pytest.mark.parametrize("cfg,match", [
        ({"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 1}]}}}, "replicas must be >= 2"),
        ({"sharing": {"timeSlicing": {"resources": []}}}, "no resources specified"),
        ({"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu"}]}}}, "no replicas specified"),
        ({"flags": {"migStrategy": "all"}}, "unknown strategy"),
    ])
    def test_configs_gfd_refuses(self, cfg, match):
        with pytest.raises(_labels.GFDConfigError, match=match):
            _labels.gfd_labels([h200_gpu()], config=cfg)

    def test_mig_strategy_label(self):
        labels = _labels.gfd_labels([h200_gpu()], config={"flags": {"migStrategy": "single"}})
        assert labels["nvidia.com/mig.strategy"] == "single"
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-H200"

    def test_mig_enabled_gpu_without_mig_strategy_has_no_replicas(self):
        # mig-strategy none: a MIG-enabled GPU is labelled "without sharing" (replicas 0)
        labels = _labels.gfd_labels([h200_gpu(mig_enabled=True)], config=TS4)
        assert (labels["nvidia.com/gpu.replicas"], labels["nvidia.com/gpu.sharing-strategy"],
                labels["nvidia.com/gpu.product"]) == ("0", "none", "NVIDIA-H200")


class TestVGPU:
    def test_nvidia_test_vectors(self):
        cap = _labels.vendor_capability(PASSTHROUGH_CONFIG)
        assert len(cap) == 20 and not _labels.is_vgpu_capability(cap)
        cap = _labels.vendor_capability(VGPU_CONFIG)
        assert len(cap) == 27 and cap[0] == 9 and _labels.is_vgpu_capability(cap)
        assert _labels.vgpu_host_driver(cap) == ("460.16", "r460_00")

    def test_short_config_is_an_error(self):
        with pytest.raises(ValueError):
            _labels.vendor_capability(VGPU_CONFIG[:64])

    def test_no_capability_list(self):
        config = bytearray(VGPU_CONFIG)
        config[6] &= ~0x10 & 0xFF
        assert _labels.vendor_capability(bytes(config)) is None

    def test_labels(self):
        assert _labels.gfd_labels([h200_gpu()], vgpu=[])["nvidia.com/vgpu.present"] == "false"
        assert "nvidia.com/vgpu.present" not in _labels.gfd_labels([h200_gpu()])
        labels = _labels.gfd_labels([h200_gpu()], vgpu=[{"bdf": H200_BDF, "host_driver_version": "460.16",
                                                         "host_driver_branch": "r460_00"}])
        assert (labels["nvidia.com/vgpu.present"], labels["nvidia.com/vgpu.host-driver-version"],
                labels["nvidia.com/vgpu.host-driver-branch"]) == ("true", "460.16", "r460_00")


class TestMode:
    @pytest.mark.parametrize("classes,mode", [
        (["030200"], "compute"), (["030000", "030000"], "graphics"),
        (["030200", "030000"], "unknown"), (["038000"], "unknown"),
    ])
    def test_gpu_mode_from_classes(self, classes, mode):
        gpus = [h200_gpu(class_id=c) for c in classes]
        assert _labels.gfd_labels(gpus)["nvidia.com/gpu.mode"] == mode


def run_compare(tmp_path, gfd_text, ours, *extra):
    gfd = tmp_path / "gfd.txt"
    gfd.write_text(gfd_text)
    ours_path = tmp_path / "ours.json"
    ours_path.write_text(ours if isinstance(ours, str) else json.dumps(ours))
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, COMPARE, "--gfd", str(gfd), "--ours", str(ours_path), "--out", str(out)] + list(extra),
                          capture_output=True, text=True, timeout=60, check=False)
    report = json.loads(out.read_text()) if out.exists() else None
    return proc, report


def gfd_file(labels, timestamp="1764748800"):
    lines = ["%s=%s" % kv for kv in labels.items()] + ["nvidia.com/gfd.timestamp=%s" % timestamp]
    return "\n".join(reversed(lines)) + "\n"  # GFD writes in map order


@needs("tests/lab/gpu/compare_labels.py")  # the GPU lane's label comparison script
class TestCompareLabels:
    def test_equal_with_gpu_facts_result(self, roots, h200_nvml, tmp_path):
        facts, _warnings = gather(roots["h200"], nvml=h200_nvml)
        result = {"changed": False, "failed": False, "ansible_facts": {"gpu": facts}}
        proc, report = run_compare(tmp_path, gfd_file(H200_GFD), result, "--ignore", "nvidia.com/gpu.present")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert report["match"] is True
        assert report["counts"] == {"gfd": 25, "ours": 25, "equal": 25, "only_gfd": 0, "only_ours": 0, "different": 0}
        assert report["ignored"] == ["nvidia.com/gfd.timestamp", "nvidia.com/gpu.present"]
        assert "MATCH" in proc.stdout and "nvidia.com/vgpu.present" in proc.stdout

    def test_equal_with_plain_label_dict(self, tmp_path):
        ours = dict(H200_GFD, **{"feature.node.kubernetes.io/pci-10de.present": "true"})
        proc, report = run_compare(tmp_path, gfd_file(H200_GFD), ours)
        assert proc.returncode == 0 and report["match"] is True
        assert "feature.node.kubernetes.io/pci-10de.present" not in json.dumps(report)

    def test_ansible_adhoc_output(self, tmp_path):
        text = "node1 | SUCCESS => " + json.dumps({"ansible_facts": {"gpu": {"labels": H200_GFD}}, "changed": False})
        proc, report = run_compare(tmp_path, gfd_file(H200_GFD), text)
        assert proc.returncode == 0 and report["match"] is True

    def test_different(self, tmp_path):
        ours = dict(H200_GFD)
        del ours["nvidia.com/vgpu.present"]
        ours["nvidia.com/gpu.machine"] = "DGX-H200"
        ours["nvidia.com/gpu.present"] = "true"
        proc, report = run_compare(tmp_path, gfd_file(H200_GFD), {"ansible_facts": {"gpu": {"labels": ours}}})
        assert proc.returncode == 1
        assert report["match"] is False
        assert report["only_gfd"] == {"nvidia.com/vgpu.present": "false"}
        assert report["only_ours"] == {"nvidia.com/gpu.present": "true"}
        assert report["different"] == {"nvidia.com/gpu.machine": {"gfd": "unknown", "ours": "DGX-H200"}}
        assert len(report["equal"]) == 23
        assert "DIFFERENT" in proc.stdout

    def test_bad_input(self, tmp_path):
        proc, report = run_compare(tmp_path, "not a label line\n", H200_GFD)
        assert proc.returncode == 2 and report is None
        proc, report = run_compare(tmp_path, gfd_file(H200_GFD), {"changed": False})
        assert proc.returncode == 2 and "expected a dict of labels" in proc.stderr
