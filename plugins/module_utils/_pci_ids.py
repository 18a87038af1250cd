# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""NVIDIA PCI device names: the host's pci.ids when present, else a built-in table.

PRIVATE: may change at any time; not for use outside gpuops.nvidia.

The built-in table also carries what GPU Feature Discovery would report for the
product (marketing name, compute capability, nominal memory in MiB, MIG capability)
so labels can be computed before a driver is installed.  Memory figures are the
values NVML reports for the product; treat them as nominal.
"""
from __future__ import annotations

import os
import re

from ansible_collections.gpuops.nvidia.plugins.module_utils._pci import NodeFileError, read_node_file

_VENDOR_LINE = re.compile(rb"\n[0-9a-f]{4}  ")

#: bytes read at most from pci.ids: the file is about 1.4 MB and grows by some 50 KB a year
PCI_IDS_LIMIT = 8 * 1024 * 1024

PCI_IDS_PATHS = (
    "usr/share/misc/pci.ids",
    "usr/share/hwdata/pci.ids",
    "usr/share/pci.ids",
    "var/lib/pciutils/pci.ids",
)

# device_id: (pci.ids name, product as NVML names it, (cc major, minor), memory MiB, MIG capable)
BUILTIN = {
    # Volta / Turing
    "1db1": ("GV100GL [Tesla V100 SXM2 16GB]", "Tesla V100-SXM2-16GB", (7, 0), 16384, False),
    "1db4": ("GV100GL [Tesla V100 PCIe 16GB]", "Tesla V100-PCIE-16GB", (7, 0), 16384, False),
    "1db5": ("GV100GL [Tesla V100 SXM2 32GB]", "Tesla V100-SXM2-32GB", (7, 0), 32768, False),
    "1eb8": ("TU104GL [Tesla T4]", "Tesla T4", (7, 5), 15360, False),
    # Ampere
    "20b0": ("GA100 [A100 SXM4 40GB]", "NVIDIA A100-SXM4-40GB", (8, 0), 40960, True),
    "20b2": ("GA100 [A100 SXM4 80GB]", "NVIDIA A100-SXM4-80GB", (8, 0), 81920, True),
    "20b5": ("GA100 [A100 PCIe 80GB]", "NVIDIA A100 80GB PCIe", (8, 0), 81920, True),
    "20f1": ("GA100 [A100 PCIe 40GB]", "NVIDIA A100-PCIE-40GB", (8, 0), 40960, True),
    "20b7": ("GA100GL [A30 PCIe]", "NVIDIA A30", (8, 0), 24576, True),
    "2230": ("GA102GL [RTX A6000]", "NVIDIA RTX A6000", (8, 6), 49140, False),
    "2236": ("GA102GL [A10]", "NVIDIA A10", (8, 6), 23028, False),
    "25b6": ("GA107GL [A2 / A16]", "NVIDIA A16", (8, 6), 15356, False),
    # Ada Lovelace
    "26b1": ("AD102GL [RTX 6000 Ada Generation]", "NVIDIA RTX 6000 Ada Generation", (8, 9), 49140, False),
    "26b5": ("AD102GL [L40]", "NVIDIA L40", (8, 9), 46068, False),
    "26b9": ("AD102GL [L40S]", "NVIDIA L40S", (8, 9), 46068, False),
    "27b8": ("AD104GL [L4]", "NVIDIA L4", (8, 9), 23034, False),
    # Hopper
    "2321": ("GH100 [H100 NVL]", "NVIDIA H100 NVL", (9, 0), 95830, True),
    "2330": ("GH100 [H100 SXM5 80GB]", "NVIDIA H100 80GB HBM3", (9, 0), 81559, True),
    "2331": ("GH100 [H100 PCIe]", "NVIDIA H100 PCIe", (9, 0), 81559, True),
    "2335": ("GH100 [H200 SXM 141GB]", "NVIDIA H200", (9, 0), 143771, True),
    "233b": ("GH100 [H200 NVL]", "NVIDIA H200 NVL", (9, 0), 143771, True),
    # Blackwell
    "2901": ("GB100 [B200]", "NVIDIA B200", (10, 0), 183359, True),
    # NVSwitch (bridge class 0x0680)
    "1af1": ("GA100 [A100 NVSwitch]", None, None, None, False),
    "22a3": ("GH100 [H100 NVSwitch]", None, None, None, False),
}


def find_pci_ids(root="/"):
    for rel in PCI_IDS_PATHS:
        path = os.path.join(root or "/", rel)
        if os.path.isfile(path):
            return path
    return None


def parse_vendor_section(data, vendor="10de"):
    """Device names of one vendor from pci.ids bytes: ``{device_id: name}``.

    Only the vendor's own section is scanned (fast: one ``find`` over the file).
    """
    marker = vendor.encode() + b"  "
    if data.startswith(marker):
        start = 0
    else:
        start = data.find(b"\n" + marker) + 1
        if start == 0:
            return {}
    nxt = _VENDOR_LINE.search(data, start + 1)
    section = data[start:nxt.start() if nxt else len(data)]
    names = {}
    for raw in section.split(b"\n")[1:]:
        if not raw or raw.startswith(b"#"):
            continue
        if not raw.startswith(b"\t"):
            break  # next vendor
        if raw.startswith(b"\t\t"):
            continue  # subsystem line
        line = raw[1:].decode("utf-8", "replace")
        dev, _sep, name = line.partition("  ")
        names[dev.lower()] = name.strip()
    return names


def load_names(root="/", vendor="10de", warnings=None):
    """(names, source): from the host's pci.ids, else ``({}, None)`` (with a warning when it is not read)."""
    path = find_pci_ids(root)
    if not path:
        return {}, None
    try:
        data = read_node_file(path, PCI_IDS_LIMIT)
    except NodeFileError as exc:
        if warnings is not None:
            warnings.append(str(exc))
        return {}, None
    return (parse_vendor_section(data, vendor), path) if data is not None else ({}, None)


def device_name(device_id, host_names):
    """Name for an NVIDIA device ID: host pci.ids, then built-in table, then the hex ID."""
    if device_id in host_names:
        return host_names[device_id]
    if device_id in BUILTIN:
        return BUILTIN[device_id][0]
    return "10de:%s" % device_id


def product_info(device_id):
    """(product, (cc major, minor), memory MiB, mig capable) from the built-in table, or None."""
    entry = BUILTIN.get(device_id)
    if not entry or not entry[1]:
        return None
    return entry[1:]
