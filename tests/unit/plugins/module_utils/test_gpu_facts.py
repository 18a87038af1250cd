"""gpu_facts readers over the real H200 capture and synthetic node trees."""
from __future__ import annotations

import csv
import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils import _gpu_facts, _labels, _pci_ids
from conftest import H200_CAPTURE, needs


def gather(root, subsets=_gpu_facts.SUBSETS, nvml=None):
    def no_nvml():
        return None, "pynvml is not importable (test)"

    return _gpu_facts.gather(root, subsets, nvml_lib=nvml, load_nvml=no_nvml)


def smi_query():
    with open(os.path.join(H200_CAPTURE, "nvidia-smi-query.csv")) as f:
        rows = list(csv.reader(f, skipinitialspace=True))
    return dict(zip(rows[0], rows[1]))


class TestH200Capture:
    def test_device_matches_capture(self, roots, h200_nvml):
        facts, warnings = gather(roots["h200"], nvml=h200_nvml)
        assert warnings == []
        assert facts["count"] == 1
        dev = facts["devices"][0]
        assert dev["bdf"] == "0000:00:06.0"
        assert (dev["vendor_id"], dev["device_id"], dev["class_id"]) == ("10de", "2335", "030200")
        assert dev["name"] == "GH100 [H200 SXM 141GB]"
        assert dev["driver"] == "nvidia"
        assert dev["iommu_group"] is None and dev["passthrough_viable"] is False
        assert dev["link"] == {"current_speed": "32.0 GT/s PCIe", "current_width": 16,
                               "max_speed": "32.0 GT/s PCIe", "max_width": 16}
        assert dev["numa_node"] is None  # -1 in sysfs
        assert facts["nvswitches"] == [] and facts["others"] == []

    def test_nvml_agrees_with_nvidia_smi(self, roots, h200_nvml):
        facts, _warnings = gather(roots["h200"], nvml=h200_nvml)
        q = smi_query()
        nv = facts["nvml"]["devices"][0]
        assert nv["uuid"] == q["uuid"]
        assert "%d MiB" % nv["memory_mib"] == q["memory.total [MiB]"]
        assert nv["compute_capability"] == q["compute_cap"]
        assert facts["nvml"]["driver_version"] == q["driver_version"]
        assert nv["bdf"] == q["pci.bus_id"][4:].lower()
        assert nv["mig_capable"] is True and nv["mig_mode"] == {"current": False, "pending": False}
        assert nv["architecture"] == "hopper"
        assert facts["devices"][0]["facts_source"] == "nvml"

    def test_mig_profiles_and_placements(self, roots, h200_nvml):
        facts, _warnings = gather(roots["h200"], nvml=h200_nvml)
        profiles = {p["id"]: p for p in facts["nvml"]["devices"][0]["gi_profiles"]}
        assert sorted(profiles) == [0, 5, 9, 14, 15, 19, 20]
        assert profiles[19]["instances"] == 7 and profiles[19]["memory_mib"] == 16384
        assert [p["start"] for p in profiles[19]["placements"]] == [0, 1, 2, 3, 4, 5, 6]
        assert [p["start"] for p in profiles[9]["placements"]] == [0, 4]
        assert profiles[0]["placements"] == [{"start": 0, "size": 8}]

    def test_kernel_and_driver(self, roots):
        facts, _warnings = gather(roots["h200"])
        assert facts["kernel"]["release"] == "6.18.44-fc-v973-gpu"
        assert facts["kernel"]["nvidia_modules"] == ["nvidia", "nvidia_uvm"]
        assert facts["kernel"]["nouveau_loaded"] is False
        assert facts["driver"]["loaded"] is True
        assert facts["driver"]["version"] == "580.159.04"
        assert facts["driver"]["kernel_module_type"] == "open"
        assert facts["driver"]["gpus"][0]["uuid"] == smi_query()["uuid"]
        assert "nvidia0" in facts["driver"]["device_nodes"]
        assert facts["secure_boot"] is None  # no UEFI in the capture
        assert facts["iommu"]["enabled"] is False and facts["iommu"]["groups"] == 0
        assert facts["os"]["id"] == "ubuntu" and facts["os"]["version_id"] == "24.04"

    def test_labels_with_nvml(self, roots, h200_nvml):
        facts, _warnings = gather(roots["h200"], nvml=h200_nvml)
        labels = facts["labels"]
        expected = {
            "feature.node.kubernetes.io/pci-10de.present": "true",
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.count": "1",
            "nvidia.com/gpu.product": "NVIDIA-H200",
            "nvidia.com/gpu.memory": "143771",
            "nvidia.com/gpu.family": "hopper",
            "nvidia.com/gpu.compute.major": "9",
            "nvidia.com/gpu.compute.minor": "0",
            "nvidia.com/gpu.mode": "compute",
            "nvidia.com/cuda.driver-version.full": "580.159.04",
            "nvidia.com/cuda.driver-version.major": "580",
            "nvidia.com/cuda.driver-version.revision": "04",
            "nvidia.com/cuda.runtime-version.full": "13.0",
            "nvidia.com/mig.capable": "true",
            "feature.node.kubernetes.io/kernel-version.major": "6",
            "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
        }
        assert {k: labels.get(k) for k in expected} == expected

    def test_labels_without_nvml_use_builtin_table(self, roots):
        facts, _warnings = gather(roots["h200"])
        assert "nvml" not in facts
        assert facts["notes"] and "pynvml" in facts["notes"][0]
        assert facts["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H200"
        assert facts["labels"]["nvidia.com/gpu.memory"] == "143771"
        assert "nvidia.com/cuda.runtime-version.full" not in facts["labels"]

    def test_nvml_init_failure_is_a_note_not_an_error(self, roots):
        from nvml_standin import NVMLStandIn

        facts, _warnings = gather(roots["h200"], nvml=NVMLStandIn(H200_CAPTURE, fail_init=True))
        assert "nvml" not in facts
        assert "DRIVER_NOT_LOADED" in facts["notes"][0]


class TestSynthetic:
    def test_hgx_with_nvswitches(self, roots):
        facts, _warnings = gather(roots["hgx-h100"])
        assert facts["count"] == 8 and len(facts["nvswitches"]) == 4
        assert {d["numa_node"] for d in facts["devices"]} == {0, 1}
        assert all(d["passthrough_viable"] and d["companions"] == [] for d in facts["devices"])
        assert facts["iommu"]["enabled"] and facts["iommu"]["vendor"] == "intel"
        assert facts["iommu"]["kernel_args"] == {"intel_iommu": "on", "iommu": "pt"}
        assert facts["iommu"]["cpu_virtualization"] == ["vmx"]
        assert facts["secure_boot"] is False
        assert facts["kernel"]["headers_present"] is True
        assert facts["labels"]["nvidia.com/gpu.count"] == "8"
        assert facts["labels"]["nvidia.com/gpu.machine"] == "DGX-H100"
        assert facts["nvswitches"][0]["name"] == "GH100 [H100 NVSwitch]"

    def test_workstation_audio_companions_and_igpu(self, roots):
        facts, _warnings = gather(roots["workstation"])
        assert [d["bdf"] for d in facts["devices"]] == ["0000:01:00.0", "0000:02:00.0"]
        assert facts["devices"][0]["companions"] == ["0000:01:00.1"]
        assert facts["devices"][1]["companions"] == ["0000:02:00.1"]
        # the root port bridge shares the group but is not an endpoint
        assert all(d["passthrough_viable"] for d in facts["devices"])
        assert [d["class_id"] for d in facts["others"]] == ["040300", "040300"]
        assert not any(d["boot_vga"] for d in facts["devices"])
        assert facts["secure_boot"] is True
        assert facts["driver"]["kernel_module_type"] == "proprietary"
        assert facts["devices"][0]["mode"] == "graphics"

    def test_passthrough_host_amd(self, roots):
        facts, _warnings = gather(roots["passthrough"])
        assert facts["iommu"]["vendor"] == "amd" and facts["iommu"]["cpu_virtualization"] == ["svm"]
        vfio = [d for d in facts["devices"] if d["driver"] == "vfio-pci"]
        assert len(vfio) == 2 and all(d["driver_override"] == "vfio-pci" for d in vfio)
        third = facts["devices"][2]
        assert third["passthrough_viable"] is False and third["iommu_group_foreign"] == ["0000:c1:00.1"]
        assert facts["kernel"]["vfio_modules"] == ["vfio", "vfio_pci", "vfio_pci_core", "vfio_iommu_type1"]
        assert facts["secure_boot"] is None
        # GFD counts only GPUs the host driver can use, not the ones reserved for VMs
        assert facts["labels"]["nvidia.com/gpu.count"] == "1"

    def test_iommu_off(self, roots):
        facts, _warnings = gather(roots["iommu-off"])
        assert facts["iommu"]["enabled"] is False and facts["iommu"]["units"] == []
        assert facts["devices"][0]["passthrough_viable"] is False

    def test_nouveau_node(self, roots):
        facts, _warnings = gather(roots["nouveau"])
        assert facts["kernel"]["nouveau_loaded"] is True
        assert facts["driver"]["loaded"] is False and facts["driver"]["version"] is None
        assert facts["kernel"]["headers_present"] is False
        assert facts["devices"][0]["driver"] == "nouveau"

    def test_no_nvidia_device_is_a_normal_answer(self, roots):
        facts, warnings = gather(roots["no-gpu"])
        assert warnings == []
        assert facts["count"] == 0 and facts["devices"] == [] and facts["nvswitches"] == []
        assert not any(k.startswith("nvidia.com/") or "pci-10de" in k for k in facts["labels"])

    def test_subset_pci_only(self, roots):
        facts, _warnings = gather(roots["hgx-h100"], ("pci",))
        assert "kernel" not in facts and "driver" not in facts and "iommu" not in facts
        assert facts["count"] == 8

    @pytest.mark.parametrize("name", ["h200", "hgx-h100", "workstation", "passthrough", "iommu-off", "nouveau", "no-gpu"])
    def test_every_node_root_reads_without_warnings_and_the_facts_say_so(self, roots, name):
        facts, warnings = gather(roots[name])
        assert warnings == [] and facts["warnings"] == []

    def test_unreadable_attribute_is_a_warning(self, tmp_path):
        import noderoots

        root = str(tmp_path)
        noderoots.build_no_gpu(root)
        noderoots.add_pci(root, "0000:07:00.0", noderoots._fn("10de", "2330", "030200"))
        numa = os.path.join(root, "sys/devices/pci0000:07/0000:07:00.0/numa_node")
        os.unlink(numa)
        os.mkdir(numa)  # reading a directory fails: must become a warning
        facts, warnings = gather(root)
        assert facts["count"] == 1 and facts["devices"][0]["numa_node"] is None
        assert any("numa_node is a directory" in w for w in warnings)
        assert facts["warnings"] == warnings


class TestPureFunctions:
    @pytest.mark.parametrize("requested,expected", [
        (["all"], _gpu_facts.SUBSETS),
        (["iommu", "pci"], ("pci", "iommu")),
        ([], _gpu_facts.SUBSETS),
    ])
    def test_resolve_subsets(self, requested, expected):
        assert _gpu_facts.resolve_subsets(requested) == expected

    def test_unknown_subset_refused(self):
        with pytest.raises(_gpu_facts.SubsetError, match="unknown gather_subset bogus"):
            _gpu_facts.resolve_subsets(["pci", "bogus"])

    @pytest.mark.parametrize("cc,family", [((7, 0), "volta"), ((7, 5), "turing"), ((8, 0), "ampere"),
                                           ((8, 9), "ada-lovelace"), ((9, 0), "hopper"), ((10, 0), "blackwell"),
                                           ((12, 0), "blackwell"), ((4, 0), "undefined")])
    def test_family(self, cc, family):
        assert _labels.family(*cc) == family

    def test_sanitise(self):
        assert _labels.sanitise("NVIDIA A100-SXM4-40GB") == "NVIDIA-A100-SXM4-40GB"
        assert _labels.sanitise("NVIDIA RTX 6000 Ada Generation") == "NVIDIA-RTX-6000-Ada-Generation"
        assert _labels.sanitise("Tesla (T4)!") == "Tesla-T4"

    def test_pci_ids_vendor_section(self):
        data = (b"# comment\n10de  NVIDIA Corporation\n\t2335  GH100 [H200 SXM 141GB]\n"
                b"\t\t10de 18bf  H200 subsystem\n\t2330  GH100 [H100 SXM5 80GB]\n10df  Emulex\n\t0001  x\n")
        assert _pci_ids.parse_vendor_section(data) == {"2335": "GH100 [H200 SXM 141GB]", "2330": "GH100 [H100 SXM5 80GB]"}
        assert _pci_ids.device_name("9999", {}) == "10de:9999"

    def test_host_pci_ids_win_over_builtin(self, tmp_path):
        import noderoots

        root = str(tmp_path)
        noderoots.build_iommu_off(root)
        noderoots._write(root, "usr/share/misc/pci.ids", "10de  NVIDIA Corporation\n\t26b9  AD102GL [L40S] (host)\n")
        facts, _warnings = gather(root, ("pci",))
        assert facts["devices"][0]["name"] == "AD102GL [L40S] (host)"
        assert facts["pci_ids_source"].endswith("usr/share/misc/pci.ids")


def test_standin_has_pynvml_call_shapes():
    """The stand-in must take the same required arguments as the real pynvml functions
    (a wrong shape once hid a bug that only the real H200 showed)."""
    import inspect

    pynvml = pytest.importorskip("pynvml")
    from nvml_standin import NVMLStandIn

    def required(fn):
        return [p.name for p in inspect.signature(fn).parameters.values()
                if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]

    names = [n for n in dir(NVMLStandIn) if n.startswith("nvml")]
    assert "nvmlDeviceGetGpuInstancePossiblePlacements" in names
    for name in names:
        assert len(required(getattr(NVMLStandIn, name))) - 1 == len(required(getattr(pynvml, name))), name


@needs("tests/lab/h200/results/gpu_facts.json")
def test_replay_agrees_with_the_real_h200_run(roots, h200_nvml):
    """gpu_facts run on a real H200 (tests/lab/h200/results, another lease of the same
    node type) and the replayed capture + NVML stand-in give the same labels and devices."""
    import json

    real_path = os.path.join(os.path.dirname(H200_CAPTURE), "..", "..", "lab", "h200", "results", "gpu_facts.json")
    with open(real_path) as f:
        real = json.load(f)["ansible_facts"]["gpu"]
    replay, _warnings = gather(roots["h200"], nvml=h200_nvml)
    assert real["labels"] == replay["labels"]
    keep = ("bdf", "device_id", "class_id", "name", "driver", "product", "memory_mib", "compute_capability", "mig_capable")
    assert [{k: d[k] for k in keep} for d in real["devices"]] == [{k: d[k] for k in keep} for d in replay["devices"]]
    real_profiles = [(p["id"], p["placements"]) for p in real["nvml"]["devices"][0]["gi_profiles"]]
    replay_profiles = [(p["id"], p["placements"]) for p in replay["nvml"]["devices"][0]["gi_profiles"]]
    assert real_profiles == replay_profiles
    assert real["nvml"]["errors"] == []
