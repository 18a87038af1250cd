"""Driver planning per distribution, over real (H200 replay) and synthetic node facts."""
from __future__ import annotations

import os

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils import _driver as d
from ansible_collections.gpuops.nvidia.plugins.module_utils._gpu_facts import gather

SUBSETS = ("pci", "kernel", "driver")


def facts(roots, name):
    gpu, _warnings = gather(roots[name], SUBSETS)
    return gpu


def host(os_id="ubuntu", version_id="24.04", release="6.8.0-49-generic", ccs=("9.0",), nvswitches=0,
         secure_boot=False, loaded=None, mtype="open", installed=None, mok=None, nouveau=False, id_like=None, arch="x86_64",
         held=None):
    """A synthetic host through host_from_facts, shaped like ansible_facts.gpu."""
    gpu = {
        "os": {"id": os_id, "version_id": version_id, "id_like": id_like},
        "kernel": {"release": release, "headers_present": True, "nouveau_loaded": nouveau, "nova_core_loaded": False},
        "driver": {"loaded": bool(loaded), "version": loaded, "kernel_module_type": mtype if loaded else None,
                   "fabricmanager_running": False},
        "devices": [{"bdf": "0000:%02x:00.0" % i, "device_id": "2330", "compute_capability": cc} for i, cc in enumerate(ccs)],
        "nvswitches": [{"bdf": "0000:%02x:00.0" % (0x80 + i)} for i in range(nvswitches)],
        "secure_boot": secure_boot,
    }
    return d.host_from_facts(gpu, installed=installed, mok=mok, arch=arch, held=held)


# --- real node facts --------------------------------------------------------------------------

def test_h200_capture_580_is_satisfied_and_leaves_the_foreign_install_alone(roots):
    """The real H200: 580.159.04 open loaded (not from packages), Ubuntu 24.04, Hopper."""
    p = d.plan(d.host_from_facts(facts(roots, "h200")), {"branch": "580"})
    assert p["satisfied"] is True and p["changes"] == [] and p["reboot_reasons"] == []
    assert p["kernel_module_type"] == "open" and "Turing" in p["kernel_module_type_reason"]
    assert p["installed"]["loaded_version"] == "580.159.04"
    assert p["manage_packages"] is False  # installed outside apt: never fight it


def test_h200_capture_exact_pin_and_570_would_change(roots):
    h = d.host_from_facts(facts(roots, "h200"))
    assert d.plan(h, {"version": "580.159.04"})["satisfied"] is True
    p = d.plan(h, {"branch": "570"})
    assert p["satisfied"] is False
    assert p["changes"][0] == "driver: replace loaded 580.159.04 (open) with 570 (open, dkms)"
    assert p["reboot_reasons"] == ["driver 580.159.04 loaded, 570 (open, dkms) requested"]
    # the VM's kernel is not an Ubuntu kernel: no precompiled modules, and a clear warning about headers
    assert p["build"] == "dkms" and p["package_specs"] == ["nvidia-headless-570-server-open", "nvidia-utils-570-server"]
    assert any("not a ubuntu distribution kernel" in w for w in p["warnings"])
    assert d.plan(h, {"version": "580.95.05"})["satisfied"] is False


def test_h200_proprietary_request_is_a_change(roots):
    p = d.plan(d.host_from_facts(facts(roots, "h200")), {"branch": "580", "kernel_module_type": "proprietary"})
    assert p["satisfied"] is False and "(open) with 580 (proprietary" in p["changes"][0]


def test_hgx_h100_nvswitch_gets_fabric_manager_matched_to_branch(roots):
    """HGX H100 (Ubuntu 22.04, generic kernel, 4 NVSwitches, 570 open loaded)."""
    h = d.host_from_facts(facts(roots, "hgx-h100"))
    p = d.plan(h, {"branch": "570"})
    assert p["satisfied"] is True and p["services"]["fabricmanager"]["enabled"] is True
    assert "nvidia-fabricmanager-570" in p["packages"] and "libnvidia-nscq-570" in p["packages"]
    assert any("fabricmanager is not running" in w for w in p["warnings"])
    up = d.plan(h, {"branch": "580"})
    assert up["build"] == "precompiled"
    assert up["packages"] == ["linux-modules-nvidia-580-server-open-6.8.0-49-generic",
                              "linux-modules-nvidia-580-server-open-generic",
                              "nvidia-headless-no-dkms-580-server-open", "nvidia-utils-580-server",
                              "nvidia-fabricmanager-580", "libnvidia-nscq-580"]
    assert up["headers"] == []
    assert d.plan(h, {"branch": "580", "fabricmanager": False})["fabricmanager_packages"] == []


def test_workstation_debian12_secure_boot_without_mok_fails_early(roots):
    """RTX A6000 (Ampere) on Debian 12 with Secure Boot on and 550 proprietary loaded."""
    h = d.host_from_facts(facts(roots, "workstation"))
    with pytest.raises(d.DriverPlanError) as exc:
        d.plan(h, {"branch": "535"})
    assert "Secure Boot is on" in str(exc.value)
    assert "mokutil --import /var/lib/dkms/mok.pub" in exc.value.remediation
    p = d.plan(h, {"branch": "535", "secure_boot_mok": True})
    assert p["secure_boot"]["strategy"] == "dkms-mok-enrol"
    assert any("MOK enrolment" in r for r in p["reboot_reasons"])
    # auto falls back to proprietary: bookworm's open module does not match its driver
    assert p["kernel_module_type"] == "proprietary" and "Debian 12" in p["kernel_module_type_reason"]


def test_nouveau_node_plans_blacklist_and_reboot(roots):
    """T4 (Turing) held by nouveau, Debian 12, no headers."""
    p = d.plan(d.host_from_facts(facts(roots, "nouveau")), {"branch": "535", "kernel_module_type": "proprietary"})
    assert any(c.startswith("blacklist: nouveau is loaded") for c in p["changes"])
    assert "nouveau holds the GPU" in p["reboot_reasons"]
    assert "blacklist nouveau" in p["blacklist"]["content"] and "blacklist nova_core" in p["blacklist"]["content"]
    assert p["initramfs_command"] == ["update-initramfs", "-u", "-k", "all"]


def test_no_gpu_node_plans_install_from_branch_default(roots):
    p = d.plan(d.host_from_facts(facts(roots, "no-gpu")), {"branch": "535"})
    assert p["gpus"] == 0 and p["kernel_module_type"] == "proprietary" and "R560" in p["kernel_module_type_reason"]
    assert p["satisfied"] is False


# --- per distribution ----------------------------------------------------------------------------

@pytest.mark.parametrize("version_id,release,flavour", [
    ("22.04", "5.15.0-126-generic", "generic"),
    ("24.04", "6.8.0-49-generic", "generic"),
    ("24.04", "6.8.0-1017-aws", "aws"),
])
def test_ubuntu_distro_precompiled(version_id, release, flavour):
    p = d.plan(host(version_id=version_id, release=release), {"branch": "580"})
    assert p["source"] == "distro" and p["build"] == "precompiled" and p["repository"] is None
    assert p["package_specs"][:2] == ["linux-modules-nvidia-580-server-open-%s" % release,
                                      "linux-modules-nvidia-580-server-open-%s" % flavour]
    assert "nvidia-headless-no-dkms-580-server-open" in p["packages"]


def test_ubuntu_distro_dkms_desktop_proprietary_with_version_pin():
    p = d.plan(host(ccs=("7.0",)), {"version": "580.95.05", "precompiled": "never", "ubuntu_server": False,
                                    "headless": False})
    assert p["kernel_module_type"] == "proprietary"  # Volta
    assert p["build"] == "dkms" and p["headers"] == ["linux-headers-6.8.0-49-generic", "linux-headers-generic"]
    assert p["package_specs"] == ["nvidia-driver-580=580.95.05-*", "nvidia-utils-580=580.95.05-*"]


def test_ubuntu_precompiled_always_on_custom_kernel_fails():
    with pytest.raises(d.DriverPlanError, match="no Canonical precompiled"):
        d.plan(host(release="6.18.44-custom"), {"branch": "580", "precompiled": "always"})


@pytest.mark.parametrize("version_id,cuda", [("22.04", "ubuntu2204"), ("24.04", "ubuntu2404")])
def test_ubuntu_cuda_repo(version_id, cuda):
    p = d.plan(host(version_id=version_id), {"branch": "580", "source": "cuda_repo"})
    repo = p["repository"]
    assert repo["kind"] == "apt" and repo["url"] == "https://developer.download.nvidia.com/compute/cuda/repos/%s/x86_64/" % cuda
    assert "Suites: /\n" in repo["content"] and "Signed-By: /etc/apt/keyrings/gpuops-cuda.asc" in repo["content"]
    assert repo["key_url"].endswith("/3bf863cc.pub")
    assert "Pin: origin developer.download.nvidia.com" in repo["preferences"]["content"]
    assert p["packages"] == ["nvidia-open-580", "nvidia-persistenced"] and p["build"] == "dkms"
    old = d.plan(host(version_id=version_id, ccs=("6.0",)), {"branch": "580", "source": "cuda_repo", "persistenced": False})
    assert old["packages"] == ["cuda-drivers-580"]
    pinned = d.plan(host(version_id=version_id, nvswitches=4), {"version": "580.95.05", "source": "cuda_repo"})
    assert pinned["package_specs"] == ["nvidia-open-580=580.95.05-*", "nvidia-persistenced=580.95.05-*",
                                       "nvidia-fabricmanager-580=580.95.05-*"]


def test_cuda_repo_mirror_air_gapped_and_arm():
    p = d.plan(host(arch="aarch64"), {"branch": "580", "source": "cuda_repo",
                                      "repo_url": "https://mirror.internal/cuda/ubuntu2404/sbsa",
                                      "repo_key_url": "https://mirror.internal/keys/cuda.pub"})
    assert p["repository"]["url"] == "https://mirror.internal/cuda/ubuntu2404/sbsa/"
    assert p["repository"]["key_url"] == "https://mirror.internal/keys/cuda.pub"
    assert "Pin: origin mirror.internal" in p["repository"]["preferences"]["content"]
    assert "/sbsa/" in d.plan(host(arch="aarch64"), {"branch": "580", "source": "cuda_repo"})["repository"]["url"]


@pytest.mark.parametrize("os_id,version_id,cuda,key", [
    ("rhel", "8.10", "rhel8", "D42D0685.pub"),
    ("rocky", "9.5", "rhel9", "D42D0685.pub"),
    ("almalinux", "9.4", "rhel9", "D42D0685.pub"),
])
def test_rhel_streams(os_id, version_id, cuda, key):
    h = host(os_id=os_id, version_id=version_id, release="5.14.0-503.el9.x86_64")
    p = d.plan(h, {"branch": "580"})
    assert p["source"] == "cuda_repo" and p["package_manager"] == "dnf"
    assert p["module_stream"] == "nvidia-driver:580-open" and p["packages"] == ["@nvidia-driver:580-open/default"]
    assert p["repository"]["path"] == "/etc/yum.repos.d/gpuops-cuda-%s.repo" % cuda
    assert "gpgkey=https://developer.download.nvidia.com/compute/cuda/repos/%s/x86_64/%s" % (cuda, key) in p["repository"]["content"]
    assert p["headers"] == ["kernel-devel-5.14.0-503.el9.x86_64", "kernel-headers-5.14.0-503.el9.x86_64"]
    assert p["initramfs_command"] == ["dracut", "-f", "--regenerate-all"]
    fm = d.plan(host(os_id=os_id, version_id=version_id, ccs=("7.0",), nvswitches=6), {"branch": "570"})
    assert fm["packages"] == ["@nvidia-driver:570-dkms/fm"]


def test_rhel10_has_no_streams_and_distro_source_is_refused():
    p = d.plan(host(os_id="rhel", version_id="10.0", release="6.12.0-55.el10.x86_64"), {"branch": "580"})
    assert p["module_stream"] is None and p["package_specs"] == ["nvidia-open-580.*", "nvidia-persistenced-580.*"]
    assert p["repository"]["url"].endswith("/rhel10/x86_64/")
    assert d.plan(host(os_id="rhel", version_id="10.0"), {"version": "580.95.05"})["package_specs"] == [
        "nvidia-open-580.95.05", "nvidia-persistenced-580.95.05"]
    with pytest.raises(d.DriverPlanError, match="do not ship"):
        d.plan(host(os_id="rhel", version_id="9.5"), {"branch": "580", "source": "distro"})


def test_debian12_distro_packages_repository_and_holds():
    installed = {"nvidia-driver": "535.309.01-0+deb12u1", "nvidia-kernel-dkms": "535.309.01-0+deb12u1",
                 "nvidia-smi": "535.309.01-0+deb12u1", "nvidia-persistenced": "535.171.04-1~deb12u1",
                 "firmware-misc-nonfree": "20230210-5", "libnvidia-ml1": "535.309.01-0+deb12u1",
                 "libcuda1": "535.309.01-0+deb12u1", "nvidia-container-toolkit": "1.17.0-1", "dkms": "3.0.10-8"}
    h = host(os_id="debian", version_id="12", release="6.1.0-28-cloud-amd64", ccs=(), installed=installed)
    p = d.plan(h, {"branch": "535"})
    assert p["packages"] == ["nvidia-kernel-dkms", "nvidia-smi", "libcuda1", "nvidia-persistenced", "firmware-misc-nonfree"]
    full = d.plan(h, {"branch": "535", "headless": False})
    assert full["packages"] == ["nvidia-driver", "nvidia-kernel-dkms", "nvidia-smi", "nvidia-persistenced", "firmware-misc-nonfree"]
    assert full["satisfied"] is True
    assert p["headers"] == ["linux-headers-6.1.0-28-cloud-amd64", "linux-headers-cloud-amd64"]
    assert "Components: contrib non-free non-free-firmware" in p["repository"]["content"]
    assert "Suites: bookworm bookworm-updates" in p["repository"]["content"]
    assert "Suites: bookworm-security" in p["repository"]["content"]
    # installed but not loaded (no GPU): the packages satisfy the request
    assert p["satisfied"] is True and p["changes"] == []
    # holds: every driver package, never the toolkit's, never dkms
    assert p["holds"] == ["libcuda1", "libnvidia-ml1", "nvidia-driver", "nvidia-kernel-dkms", "nvidia-persistenced", "nvidia-smi"]
    assert p["holds_missing"] == p["holds"] and p["holds_present"] == []
    rerun = d.plan(host(os_id="debian", version_id="12", release="6.1.0-28-cloud-amd64", ccs=(), installed=installed,
                        held=set(p["holds"]) | {"nvidia-container-toolkit"}), {"branch": "535"})
    assert rerun["holds_missing"] == [] and rerun["holds_present"] == p["holds"]  # the toolkit's hold is not ours
    assert "nvidia-current" in p["module_names"]
    pinned = d.plan(h, {"version": "535.309.01"})
    assert "nvidia-kernel-dkms=535.309.01-*" in pinned["package_specs"] and "nvidia-persistenced" in pinned["package_specs"]
    assert pinned["satisfied"] is True
    assert d.plan(h, {"version": "535.216.03"})["satisfied"] is False


def test_debian_distro_refusals():
    h = host(os_id="debian", version_id="12", release="6.1.0-28-amd64")
    with pytest.raises(d.DriverPlanError) as exc:
        d.plan(h, {"branch": "580"})
    assert "ships driver branch 535" in str(exc.value) and "cuda_repo" in exc.value.remediation
    with pytest.raises(d.DriverPlanError, match="cannot install the open module"):
        d.plan(h, {"branch": "535", "kernel_module_type": "open"})
    with pytest.raises(d.DriverPlanError, match="no nvidia-fabricmanager"):
        d.plan(host(os_id="debian", version_id="12", ccs=("7.0",), nvswitches=6), {"branch": "535"})
    p = d.plan(h, {"branch": "580", "source": "cuda_repo"})
    assert p["packages"][0] == "nvidia-open-580" and p["repository"]["url"].endswith("/debian12/x86_64/")


def test_debian13_distro_open():
    p = d.plan(host(os_id="debian", version_id="13", release="6.12.27-amd64"), {"branch": "550"})
    assert p["kernel_module_type"] == "open" and "nvidia-open-kernel-dkms" in p["packages"]
    assert "Suites: trixie trixie-updates" in p["repository"]["content"]


def test_unsupported_os_and_bad_branch():
    with pytest.raises(d.DriverPlanError, match="unsupported OS"):
        d.plan(host(os_id="arch", version_id=""), {"branch": "580"})
    with pytest.raises(d.DriverPlanError, match="driver_branch"):
        d.plan(host(), {"branch": "latest"})
    with pytest.raises(d.DriverPlanError, match="not on branch"):
        d.plan(host(), {"branch": "580", "version": "570.1.2"})
    assert d.os_family({"id": "linuxmint", "id_like": "ubuntu debian", "version_id": "22"})[0] == "ubuntu"


# --- module type ---------------------------------------------------------------------------------

@pytest.mark.parametrize("requested,ccs,branch,expected", [
    ("auto", [(9, 0)], "580", "open"),
    ("auto", [(7, 5)], "535", "open"),
    ("auto", [(7, 0), (9, 0)], "580", "proprietary"),
    ("auto", [], "580", "open"),
    ("auto", [], "550", "proprietary"),
    ("proprietary", [(9, 0)], "580", "proprietary"),
])
def test_module_type(requested, ccs, branch, expected):
    assert d.resolve_module_type(requested, branch, ccs)[0] == expected


@pytest.mark.parametrize("requested,ccs,branch,match", [
    ("open", [(6, 0)], "580", "need Turing"),
    ("proprietary", [(10, 0)], "580", "only work with the open"),
    ("auto", [(7, 0)], "590", "not supported by branch 590"),
])
def test_module_type_refusals(requested, ccs, branch, match):
    with pytest.raises(d.DriverPlanError, match=match):
        d.resolve_module_type(requested, branch, ccs)


# --- Secure Boot ---------------------------------------------------------------------------------

def test_secure_boot_precompiled_signed_on_ubuntu():
    p = d.plan(host(secure_boot=True), {"branch": "580"})
    assert p["secure_boot"]["strategy"] == "precompiled-signed"


def test_secure_boot_dkms_with_enrolled_key():
    mok = {"key_path": "/var/lib/dkms/mok.pub", "key_present": True, "enrolled": True}
    p = d.plan(host(secure_boot=True, release="6.18.1-custom", mok=mok), {"branch": "580"})
    assert p["build"] == "dkms" and p["secure_boot"]["strategy"] == "dkms-mok-enrolled" and p["reboot_reasons"] == []


def test_secure_boot_irrelevant_when_satisfied():
    p = d.plan(host(secure_boot=True, release="6.18.1-custom", loaded="580.95.05"), {"branch": "580"})
    assert p["satisfied"] is True and p["secure_boot"]["strategy"] == "loaded"


# --- absent --------------------------------------------------------------------------------------

def test_absent_removes_and_lifts_holds():
    installed = {"nvidia-driver": "535.309.01-0+deb12u1", "nvidia-kernel-dkms": "535.309.01-0+deb12u1",
                 "libnvidia-ml1": "535.309.01-0+deb12u1", "nvidia-container-toolkit": "1.17.0-1",
                 "firmware-misc-nonfree": "20230210-5", "linux-headers-amd64": "6.1.158-1"}
    held = {"nvidia-driver", "nvidia-kernel-dkms", "libnvidia-ml1"}
    p = d.plan(host(os_id="debian", version_id="12", release="6.1.0-28-amd64", ccs=(), installed=installed, held=held),
               {"branch": "535", "state": "absent"})
    assert p["satisfied"] is False and p["remove"] == ["libnvidia-ml1", "nvidia-driver", "nvidia-kernel-dkms"]
    assert p["unholds"] == p["remove"] and p["holds"] == []
    assert d.plan(host(os_id="debian", version_id="12", ccs=()), {"branch": "535", "state": "absent"})["satisfied"] is True
    ubuntu = {"linux-modules-nvidia-580-server-open-6.8.0-49-generic": "6.8.0-49.49+1",
              "linux-modules-nvidia-580-server-open-generic": "6.8.0-49.49+1",
              "nvidia-headless-no-dkms-580-server-open": "580.95.05-0ubuntu0.24.04.2", "linux-generic": "6.8.0-49.49"}
    assert d.plan(host(installed=ubuntu), {"branch": "580", "state": "absent"})["remove"] == sorted(set(ubuntu) - {"linux-generic"})
    loaded = d.plan(host(loaded="580.95.05"), {"branch": "580", "state": "absent"})
    assert loaded["reboot_reasons"] == ["driver 580.95.05 removed but still loaded"]


# --- readers -------------------------------------------------------------------------------------

def test_dpkg_status_and_rpm_parsing(tmp_path):
    status = ("Package: nvidia-driver\nStatus: hold ok installed\nVersion: 535.309.01-0+deb12u1\nDescription: x\n y\n\n"
              "Package: nvidia-kernel-dkms\nStatus: deinstall ok config-files\nVersion: 535.309.01-0+deb12u1\n\n"
              "Package: dkms\nStatus: install ok installed\nVersion: 3.0.10-8\n")
    os.makedirs(tmp_path / "var/lib/dpkg")
    (tmp_path / "var/lib/dpkg/status").write_text(status)
    assert d.read_dpkg_installed(str(tmp_path)) == {"nvidia-driver": "535.309.01-0+deb12u1", "dkms": "3.0.10-8"}
    assert d.read_dpkg_installed(str(tmp_path / "nowhere")) is None
    assert d.parse_installed("nvidia-driver\t580.95.05\nkmod-nvidia-open-dkms\t580.95.05\n", "dnf") == {
        "nvidia-driver": "580.95.05", "kmod-nvidia-open-dkms": "580.95.05"}
    assert d.upstream_version("1:580.95.05-0ubuntu0.24.04.2") == "580.95.05"


def test_held_and_versionlock_readers(tmp_path):
    status = ("Package: nvidia-driver\nStatus: hold ok installed\nVersion: 535.309.01-0+deb12u1\n\n"
              "Package: dkms\nStatus: install ok installed\nVersion: 3.0.10-8\n")
    assert d.parse_dpkg_held(status) == {"nvidia-driver"}
    os.makedirs(tmp_path / "etc/dnf/plugins")
    (tmp_path / "etc/dnf/plugins/versionlock.list").write_text(
        "# Added lock on Mon\nnvidia-driver-3:580.95.05-1.el9.*\nkmod-nvidia-open-dkms-3:580.95.05-1.el9.*\n")
    assert d.read_versionlock(str(tmp_path)) == {"nvidia-driver", "kmod-nvidia-open-dkms"}


def test_mok_enrolment_read_from_moklist(tmp_path):
    cert = b"\x30\x82\x03\x00fake-der-certificate"
    os.makedirs(tmp_path / "var/lib/dkms")
    (tmp_path / "var/lib/dkms/mok.pub").write_bytes(cert)
    assert d.read_mok(str(tmp_path), "debian") == {"key_path": "/var/lib/dkms/mok.pub", "key_present": True, "enrolled": False}
    os.makedirs(tmp_path / "sys/firmware/efi/mok-variables")
    (tmp_path / "sys/firmware/efi/mok-variables/MokListRT").write_bytes(b"\xa1\x59\xc0\xa5" + cert + b"\x00")
    assert d.read_mok(str(tmp_path), "debian")["enrolled"] is True
    assert d.read_mok(str(tmp_path / "none"), "ubuntu") == {"key_path": None, "key_present": False, "enrolled": None}


def test_device_holders(tmp_path):
    fd = tmp_path / "proc/4242/fd"
    os.makedirs(fd)
    (tmp_path / "proc/4242/comm").write_text("python3\n")
    os.symlink("/dev/nvidia0", str(fd / "3"))
    os.symlink("/dev/nvidiactl", str(fd / "4"))
    os.symlink("/dev/null", str(fd / "5"))
    os.makedirs(tmp_path / "proc/17/fd")
    assert d.device_holders(str(tmp_path)) == [{"pid": 4242, "comm": "python3", "devices": ["/dev/nvidia0", "/dev/nvidiactl"]}]


# --- target kernel, branch pin, module signing (the native driver lane's root) --------------------------

def test_target_kernel_running_newest_and_requested():
    assert d.target_kernel("6.1.0-50-cloud-amd64", ["6.1.0-50-cloud-amd64"]) == ("6.1.0-50-cloud-amd64", None)
    assert d.target_kernel("6.8.0-49-generic", []) == ("6.8.0-49-generic", None)  # nothing listed: trust uname
    # a chroot on a builder: its own newest kernel, numerically (51 > 9, 6.12 > 6.1)
    rel, note = d.target_kernel("6.18.44-fc-v1147", ["6.1.0-9-amd64", "6.1.0-51-amd64", "6.12.0-1-amd64"])
    assert rel == "6.12.0-1-amd64" and "not installed in this root" in note and "6.18.44-fc-v1147" in note
    assert d.target_kernel("6.18.44", ["6.1.0-9-amd64"], "6.1.0-9-amd64")[0] == "6.1.0-9-amd64"
    with pytest.raises(d.DriverPlanError, match="is not installed here"):
        d.target_kernel("6.18.44", ["6.1.0-9-amd64"], "6.99.0-1-amd64")
    with pytest.raises(d.DriverPlanError, match="is not a kernel release"):
        d.target_kernel("6.18.44", [], "6.1.0 ;reboot")


def test_plan_in_a_chroot_builds_for_the_roots_kernel():
    gpu = {"os": {"id": "debian", "version_id": "12"}, "kernel": {"release": "6.18.44-fc-v1147", "headers_present": False},
           "driver": {"loaded": False}, "devices": [], "nvswitches": [], "secure_boot": None}
    h = d.host_from_facts(gpu, kernels=(["6.1.0-50-cloud-amd64"], []))
    p = d.plan(h, {"branch": "535"})
    assert p["kernel_release"] == "6.1.0-50-cloud-amd64" and p["running_kernel"] == "6.18.44-fc-v1147"
    assert p["headers"] == ["linux-headers-6.1.0-50-cloud-amd64", "linux-headers-cloud-amd64"]
    assert any("building for its newest kernel 6.1.0-50-cloud-amd64" in n for n in p["notes"])
    assert not any("not a debian distribution kernel" in w for w in p["warnings"])


def test_apt_pin_on_branch_or_version_and_none_for_dnf_or_absent():
    h = host(os_id="debian", version_id="12", release="6.1.0-28-cloud-amd64", ccs=())
    branch = d.plan(h, {"branch": "535"})["pin"]
    assert branch["path"] == "/etc/apt/preferences.d/gpuops-nvidia-driver"
    assert "Pin: version 535.*\nPin-Priority: 1001\n" in branch["content"]
    assert "Package: /^(nvidia-|libnvidia-|libcuda1" in branch["content"]
    assert "Pin: version 535.309.01-*\n" in d.plan(h, {"version": "535.309.01"})["pin"]["content"]
    assert d.plan(h, {"branch": "535", "state": "absent"})["pin"]["content"] is None
    rhel = d.plan(host(os_id="rocky", version_id="9.4", id_like="rhel centos fedora", release="5.14.0-427.el9.x86_64"),
                  {"branch": "580"})
    assert rhel["pin"] == {"path": None, "content": None}


def test_signing_generated_given_and_refused():
    h = host(os_id="debian", version_id="12", release="6.1.0-28-cloud-amd64", ccs=())
    assert d.plan(h, {"branch": "535"})["signing"]["enabled"] is False
    p = d.plan(h, {"branch": "535", "secure_boot_mok": True})
    s = p["signing"]
    assert s["enabled"] and s["generate"] and s["key"] == "/var/lib/dkms/mok.key" and s["cert"] == "/var/lib/dkms/mok.pub"
    assert s["conf"]["content"].endswith("mok_signing_key=/var/lib/dkms/mok.key\nmok_certificate=/var/lib/dkms/mok.pub\n")
    # Secure Boot off or unknown: signed anyway, enrolment planned and reported, no reboot
    assert p["secure_boot"]["strategy"] == "dkms-signed-enrol-planned"
    assert "mokutil --import /var/lib/dkms/mok.pub" in p["secure_boot"]["instructions"]
    assert not any("MOK" in r for r in p["reboot_reasons"])
    given = d.plan(h, {"branch": "535", "secure_boot_mok": True, "mok_key": "/etc/keys/mok.key",
                       "mok_cert": "/etc/keys/mok.der"})
    assert given["signing"]["generate"] is False and "mok_signing_key=/etc/keys/mok.key" in given["signing"]["conf"]["content"]
    assert "mokutil --import /etc/keys/mok.der" in given["secure_boot"]["instructions"]
    existing = host(os_id="debian", version_id="12", release="6.1.0-28-cloud-amd64", ccs=(),
                    mok={"key_path": "/var/lib/dkms/mok.pub", "key_present": True, "enrolled": None})
    assert d.plan(existing, {"branch": "535", "secure_boot_mok": True, "mok_generate": False})["signing"]["generate"] is False
    with pytest.raises(d.DriverPlanError, match="no signing key exists"):
        d.plan(h, {"branch": "535", "secure_boot_mok": True, "mok_generate": False})
    for bad in ("/tmp/k;reboot", "relative/key", "/tmp/$(id)", "/tmp/a b"):
        with pytest.raises(d.DriverPlanError, match="must be an absolute path"):
            d.plan(h, {"branch": "535", "secure_boot_mok": True, "mok_key": bad, "mok_cert": "/tmp/c.der"})
    with pytest.raises(d.DriverPlanError, match="go together"):
        d.plan(h, {"branch": "535", "secure_boot_mok": True, "mok_key": "/tmp/k"})
    # Secure Boot on and the key enrolled already: nothing to plan
    on = host(os_id="debian", version_id="12", release="6.1.0-28-cloud-amd64", ccs=(), secure_boot=True,
              mok={"key_path": "/var/lib/dkms/mok.pub", "key_present": True, "enrolled": True})
    assert d.plan(on, {"branch": "535", "secure_boot_mok": True})["secure_boot"]["strategy"] == "dkms-mok-enrolled"


def test_kernel_reader(tmp_path):
    for rel, build in (("6.1.0-50-cloud-amd64", True), ("6.1.0-49-cloud-amd64", False)):
        (tmp_path / "lib/modules" / rel).mkdir(parents=True)
        (tmp_path / "lib/modules" / rel / "modules.order").write_text("")
        if build:
            (tmp_path / "lib/modules" / rel / "build").mkdir()
    (tmp_path / "lib/modules/6.1.0-48-cloud-amd64").mkdir()  # leftover directory of a removed kernel
    assert d.read_kernels(str(tmp_path)) == (["6.1.0-49-cloud-amd64", "6.1.0-50-cloud-amd64"], ["6.1.0-50-cloud-amd64"])
    assert d.read_kernels(str(tmp_path / "nowhere")) == ([], [])
