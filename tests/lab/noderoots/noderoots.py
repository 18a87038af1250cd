"""Build node root trees (sysfs/procfs/etc under a directory) for tests and the lab.

Two sources:
- a replay of the real H200 capture (tests/fixtures/nodes/h200-ubuntu2404-vm);
- synthetic nodes described as data below (HGX H100 with NVSwitches, a workstation,
  a passthrough host on AMD IOMMU, an IOMMU-off node, a node without NVIDIA devices).

Each tree is what `gpuops.nvidia.gpu_facts` reads with `root=<tree>`.  The same trees
back the lab's simulated nodes, so the lab's hosts and the cluster's nodes agree.
"""
from __future__ import annotations

import json
import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
H200_DIR = os.path.join(REPO, "tests", "fixtures", "nodes", "h200-ubuntu2404-vm")
SECURE_BOOT_VAR = "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


def _write(root, rel, content, mode=0o644):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = content if isinstance(content, bytes) else content.encode()
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)
    return path


def _symlink(target, link):
    os.makedirs(os.path.dirname(link), exist_ok=True)
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(target, link)


def add_pci(root, bdf, attrs, driver=None, iommu_group=None, physfn=None):
    """One PCI function, laid out as the kernel does (device dir + bus symlink)."""
    bus = bdf.split(":")[1]
    real = os.path.join(root, "sys/devices/pci0000:%s" % bus, bdf)
    os.makedirs(real, exist_ok=True)
    for name, value in attrs.items():
        _write(real, name, "%s\n" % value)
    _symlink("../../../devices/pci0000:%s/%s" % (bus, bdf), os.path.join(root, "sys/bus/pci/devices", bdf))
    if driver:
        os.makedirs(os.path.join(root, "sys/bus/pci/drivers", driver), exist_ok=True)
        _symlink("../../../bus/pci/drivers/%s" % driver, os.path.join(real, "driver"))
        _symlink("../../../../devices/pci0000:%s/%s" % (bus, bdf), os.path.join(root, "sys/bus/pci/drivers", driver, bdf))
    if iommu_group is not None:
        gdir = os.path.join(root, "sys/kernel/iommu_groups", str(iommu_group), "devices")
        os.makedirs(gdir, exist_ok=True)
        _symlink("../../../kernel/iommu_groups/%s" % iommu_group, os.path.join(real, "iommu_group"))
        _symlink("../../../../devices/pci0000:%s/%s" % (bus, bdf), os.path.join(gdir, bdf))
    if physfn:
        _symlink("../%s" % physfn, os.path.join(real, "physfn"))


def _base(root, release, cmdline, modules, os_id, version_id, cpu_flags, machine=None):
    _write(root, "proc/sys/kernel/osrelease", release + "\n")
    _write(root, "proc/cmdline", cmdline + "\n")
    _write(root, "proc/modules", "".join("%s 16384 0 - Live 0x0\n" % m for m in modules))
    _write(root, "proc/cpuinfo", "processor\t: 0\nflags\t\t: fpu vme de pse %s\n" % " ".join(cpu_flags))
    _write(root, "etc/os-release", 'ID=%s\nVERSION_ID="%s"\nPRETTY_NAME="%s %s"\n' % (os_id, version_id, os_id, version_id))
    os.makedirs(os.path.join(root, "sys/bus/pci/devices"), exist_ok=True)
    os.makedirs(os.path.join(root, "dev"), exist_ok=True)
    if machine:
        _write(root, "sys/class/dmi/id/product_name", machine + "\n")


def _driver(root, version, open_module, gpus):
    kind = "Open Kernel Module for x86_64" if open_module else "x86_64 Kernel Module"
    _write(root, "proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX %s  %s  Release Build\nGCC version: gcc 12\n" % (kind, version))
    _write(root, "sys/module/nvidia/version", version + "\n")
    _write(root, "dev/nvidiactl", "")
    _write(root, "usr/bin/nvidia-smi", "#!/bin/sh\n", 0o755)
    for i, (bdf, model, uuid) in enumerate(gpus):
        _write(root, "proc/driver/nvidia/gpus/%s/information" % bdf,
               "Model: \t\t %s\nGPU UUID: \t %s\nBus Location: \t %s\nDevice Minor: \t %d\nGPU Excluded:\t No\n" % (model, uuid, bdf, i))
        _write(root, "dev/nvidia%d" % i, "")


def _efi(root, secure_boot):
    os.makedirs(os.path.join(root, "sys/firmware/efi/efivars"), exist_ok=True)
    if secure_boot is not None:
        _write(root, SECURE_BOOT_VAR, bytes([6, 0, 0, 0, 1 if secure_boot else 0]))


def _iommu_units(root, names):
    for n in names:
        os.makedirs(os.path.join(root, "sys/class/iommu", n), exist_ok=True)


def _fn(vendor, device, klass, numa=0, **extra):
    attrs = {"vendor": "0x" + vendor, "device": "0x" + device, "class": "0x" + klass,
             "subsystem_vendor": "0x" + vendor, "subsystem_device": "0x0000", "revision": "0xa1",
             "numa_node": str(numa), "driver_override": "(null)",
             "modalias": "pci:v0000%sd0000%ssv00000000sd00000000bc%ssc%si00" % (vendor.upper(), device.upper(), klass[:2].upper(), klass[2:4].upper())}
    attrs.update(extra)
    return attrs


GPU_LINK = {"current_link_speed": "32.0 GT/s PCIe", "current_link_width": "16",
            "max_link_speed": "32.0 GT/s PCIe", "max_link_width": "16"}


def build_h200(root):
    """Replay the real H200 capture: sysfs PCI entries and the proc/dev/etc parts of node.txt."""
    with open(os.path.join(H200_DIR, "pci_sysfs.json")) as f:
        pci = json.load(f)
    for bdf, entry in pci.items():
        attrs = {k: v for k, v in entry.items() if k not in ("entries", "driver", "firmware_node", "realpath", "iommu_group")}
        driver = os.path.basename(entry["driver"]) if entry.get("driver") else None
        group = os.path.basename(entry["iommu_group"]) if entry.get("iommu_group") else None
        add_pci(root, bdf, attrs, driver=driver, iommu_group=group)
    sections = _sections(os.path.join(H200_DIR, "node.txt"))
    release = sections["uname"][0].split()[2]
    os_release = "\n".join(sections["os-release"]) + "\n"
    _write(root, "proc/sys/kernel/osrelease", release + "\n")
    _write(root, "proc/cmdline", sections["cmdline"][0] + "\n")
    _write(root, "proc/modules", "\n".join(sections["lsmod"]) + "\n")
    _write(root, "etc/os-release", os_release)
    proc = sections["proc driver"]
    version_line = [ln for ln in proc if ln.startswith("NVRM version")][0]
    _write(root, "proc/driver/nvidia/version", version_line + "\n")
    info_start = proc.index([ln for ln in proc if ln.startswith("# /proc/driver/nvidia/gpus/")][0])
    info_path = proc[info_start][2:]
    _write(root, info_path.lstrip("/"), "\n".join(proc[info_start + 1:]) + "\n")
    _write(root, "sys/module/nvidia/version", sections["sys module nvidia"][-1] + "\n")
    for line in sections["dev"]:
        parts = line.split()
        if line.startswith("c") and len(parts) >= 10 and parts[-1].startswith("/dev/"):
            _write(root, parts[-1].lstrip("/"), "")
    _write(root, "proc/cpuinfo", "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu vme de pse\n")
    for path in sections["which"]:
        if path.startswith("/usr/local/nvidia/bin/"):
            _write(root, path.lstrip("/"), "#!/bin/sh\n", 0o755)
    os.makedirs(os.path.join(root, "sys/kernel/iommu_groups"), exist_ok=True)


def _sections(path):
    out, name = {}, None
    with open(path) as f:
        for line in f.read().splitlines():
            if line.startswith("## "):
                name = line[3:].strip()
                out[name] = []
            elif name is not None:
                out[name].append(line)
    return out


def build_hgx_h100(root):
    """8x H100 SXM5 + 4 NVSwitches, Intel IOMMU on, UEFI with Secure Boot off, driver 570 open."""
    _base(root, "6.8.0-49-generic", "BOOT_IMAGE=/vmlinuz-6.8.0-49-generic root=/dev/sda1 ro intel_iommu=on iommu=pt",
          ["nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia"], "ubuntu", "22.04", ["vmx"], "DGX H100")
    _iommu_units(root, ["dmar0", "dmar1", "dmar2", "dmar3"])
    _efi(root, False)
    gpus = []
    for i in range(8):
        bdf = "0000:%02x:00.0" % (0x18 + 0x10 * i)
        add_pci(root, bdf, _fn("10de", "2330", "030200", numa=0 if i < 4 else 1, **GPU_LINK), driver="nvidia", iommu_group=20 + i)
        gpus.append((bdf, "NVIDIA H100 80GB HBM3", "GPU-%08d-0000-0000-0000-000000000000" % i))
    for i in range(4):
        add_pci(root, "0000:%02x:00.0" % (0x05 + i), _fn("10de", "22a3", "068000", numa=0), driver="nvidia", iommu_group=40 + i)
    add_pci(root, "0000:00:00.0", _fn("8086", "09a2", "060000"), iommu_group=0)
    _driver(root, "570.124.06", True, gpus)
    os.makedirs(os.path.join(root, "lib/modules/6.8.0-49-generic/build"), exist_ok=True)
    _write(root, "lib/modules/6.8.0-49-generic/build/Makefile", "")


def build_workstation(root):
    """Two RTX A6000 cards, each with its HDMI audio function in its own group (plus the
    root port bridge), an Intel iGPU as boot VGA, Intel IOMMU on, Secure Boot on."""
    _base(root, "6.1.0-28-amd64", "BOOT_IMAGE=/boot/vmlinuz-6.1.0-28-amd64 root=UUID=abc ro quiet intel_iommu=on",
          ["nvidia_drm", "nvidia_modeset", "nvidia", "snd_hda_intel"], "debian", "12", ["vmx"], "Precision 7960 Tower")
    _iommu_units(root, ["dmar0", "dmar1"])
    _efi(root, True)
    add_pci(root, "0000:00:02.0", _fn("8086", "a780", "030000", boot_vga="1"), driver="i915", iommu_group=0)
    gpus = []
    for n, (bus, group) in enumerate(((0x01, 1), (0x02, 2))):
        add_pci(root, "0000:00:01.%d" % n, _fn("8086", "a70d", "060400"), driver="pcieport", iommu_group=group)
        bdf = "0000:%02x:00.0" % bus
        add_pci(root, bdf, _fn("10de", "2230", "030000", boot_vga="0", **GPU_LINK), driver="nvidia", iommu_group=group)
        add_pci(root, "0000:%02x:00.1" % bus, _fn("10de", "1aef", "040300"), driver="snd_hda_intel", iommu_group=group)
        gpus.append((bdf, "NVIDIA RTX A6000", "GPU-aaaaaaa%d-0000-0000-0000-000000000000" % n))
    _driver(root, "550.127.05", False, gpus)


def build_passthrough(root):
    """AMD IOMMU host whose two A100s are already on vfio-pci, plus a third GPU that shares
    its group with a NIC (not viable for passthrough).  No UEFI (legacy BIOS boot)."""
    _base(root, "5.14.0-503.el9.x86_64", "BOOT_IMAGE=(hd0,gpt2)/vmlinuz root=/dev/mapper/rl-root ro amd_iommu=on iommu=pt rd.driver.pre=vfio-pci",
          ["vfio_pci", "vfio_pci_core", "vfio_iommu_type1", "vfio"], "rocky", "9.5", ["svm"], "PowerEdge R7525")
    _iommu_units(root, ["ivhd0", "ivhd1"])
    for i, bus in enumerate((0x41, 0x81)):
        add_pci(root, "0000:%02x:00.0" % bus, _fn("10de", "20b5", "030200", numa=i, driver_override="vfio-pci", **GPU_LINK),
                driver="vfio-pci", iommu_group=30 + i)
    add_pci(root, "0000:c1:00.0", _fn("10de", "20b5", "030200", numa=1, **GPU_LINK), iommu_group=50)
    add_pci(root, "0000:c1:00.1", _fn("14e4", "1657", "020000", numa=1), driver="tg3", iommu_group=50)
    os.makedirs(os.path.join(root, "dev/vfio"), exist_ok=True)
    for g in (30, 31):
        _write(root, "dev/vfio/%d" % g, "")


def build_iommu_off(root):
    """One L40S, driver loaded, IOMMU not enabled in the kernel (no units, no groups)."""
    _base(root, "6.8.0-49-generic", "BOOT_IMAGE=/vmlinuz-6.8.0-49-generic root=/dev/sda1 ro",
          ["nvidia_uvm", "nvidia"], "ubuntu", "24.04", ["vmx"])
    add_pci(root, "0000:3b:00.0", _fn("10de", "26b9", "030200", **GPU_LINK), driver="nvidia")
    _driver(root, "580.95.05", True, [("0000:3b:00.0", "NVIDIA L40S", "GPU-11111111-0000-0000-0000-000000000000")])
    _efi(root, False)


def build_nouveau(root):
    """A T4 held by nouveau, no NVIDIA driver, kernel headers missing."""
    _base(root, "6.1.0-28-amd64", "BOOT_IMAGE=/boot/vmlinuz-6.1.0-28-amd64 root=UUID=abc ro",
          ["nouveau", "drm"], "debian", "12", ["vmx"])
    add_pci(root, "0000:5e:00.0", _fn("10de", "1eb8", "030200", **GPU_LINK), driver="nouveau")


def build_no_gpu(root):
    """A CPU node: no NVIDIA device at all."""
    _base(root, "6.1.0-28-amd64", "BOOT_IMAGE=/boot/vmlinuz root=UUID=abc ro", ["e1000e"], "debian", "12", ["vmx"])
    add_pci(root, "0000:00:00.0", _fn("8086", "1237", "060000"))
    add_pci(root, "0000:00:19.0", _fn("8086", "15b8", "020000"), driver="e1000e")


BUILDERS = {
    "h200": build_h200,
    "hgx-h100": build_hgx_h100,
    "workstation": build_workstation,
    "passthrough": build_passthrough,
    "iommu-off": build_iommu_off,
    "nouveau": build_nouveau,
    "no-gpu": build_no_gpu,
}


def build(name, root, clean=True):
    if clean and os.path.isdir(root):
        shutil.rmtree(root)
    os.makedirs(root, exist_ok=True)
    BUILDERS[name](root)
    return root


def build_all(out):
    return {name: build(name, os.path.join(out, name)) for name in BUILDERS}
