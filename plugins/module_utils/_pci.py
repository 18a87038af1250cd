# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""PCI and IOMMU-group readers over a sysfs tree rooted at ``root``.

PRIVATE: may change at any time; not for use outside gpuops.nvidia.

Pure functions: every reader takes the filesystem root ("/" on a host, a fixture
tree in tests) and returns plain dicts/lists.  Nothing here imports Ansible.

It also holds the one way the collection reads a file of a node (sysfs, procfs, /etc, pci.ids, under any
root): :func:`read_node_file` and :func:`read_node_text` (and :func:`read_attr` on top of them).  What a
node holds is not trusted to be the file it should be:

- only a regular file is read.  ``stat`` comes first, so a FIFO, socket or device node is never even opened
  (opening a FIFO blocks until a writer comes; opening some devices acts, as a watchdog does); the open is
  non-blocking and ``fstat`` checks again what was opened, so a file swapped in between is refused too;
- at most a bound of bytes, chosen per file and documented where it is read (:data:`ATTR_LIMIT` for an
  attribute).  procfs reports ``st_size`` 0 and sysfs 4096 whatever they hold, so the bound applies to the
  bytes read, never to ``st_size``;
- links are followed (sysfs device directories and ``/etc/os-release`` are links); the checks apply to what
  the link leads to;
- every refusal is a :class:`NodeFileError` whose text names the file and what it is; the readers of facts
  turn it into a warning.
"""
from __future__ import annotations

import errno
import os
import re
import stat

from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import HostError

NVIDIA_VENDOR = "10de"
BDF_RE = re.compile(r"^(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\Z")
#: a vendor:device ID in a module's ``devices`` list
DEVICE_ID_RE = re.compile(r"^([0-9a-fA-F]{4}):([0-9a-fA-F]{4})\Z")
#: the ``devices`` item that names every NVIDIA GPU of the host
ALL_NVIDIA = "all_nvidia"

#: bound drivers that mean "reserved for a VM", not usable by the host
VFIO_DRIVERS = ("vfio-pci", "nvgrace_gpu_vfio_pci", "nvgrace-gpu-vfio-pci", "pci-stub")


def normalize_bdf(bdf):
    """Return the canonical ``dddd:bb:dd.f`` form (lower case), or None if malformed."""
    if not isinstance(bdf, str) or not BDF_RE.match(bdf.strip()):
        return None
    bdf = bdf.strip().lower()
    return bdf if bdf.count(":") == 2 else "0000:" + bdf


def sysfs_path(root, *parts):
    return os.path.join(root or "/", *[p.lstrip("/") for p in parts])


def host_path(root, path):
    """Where a module finds the host file ``path``: ``path`` itself on the real root (``root`` "/" or ""), else the
    same path under the node-root tree ``root``."""
    return path if root in ("/", "") else sysfs_path(root, path)


def resolve_device_items(devices, by_bdf, all_nvidia, error, example_id, keep=None):
    """The user's ``devices`` list (PCI addresses, vendor:device IDs, ``all_nvidia``) as ``(item, BDFs)`` pairs, in
    its order.

    ``all_nvidia()`` gives the BDFs of ``all_nvidia`` (and may raise); a vendor:device ID names every function of
    ``by_bdf`` with that ID that ``keep(dev)`` accepts (all when ``keep`` is None).  Raises ``error`` naming every
    malformed item (the message shows ``example_id`` as an ID), then every item that names nothing on the host.
    """
    out, bad, missing = [], [], []
    for item in devices:
        item = str(item).strip()
        if item == ALL_NVIDIA:
            out.append((item, all_nvidia()))
            continue
        m = DEVICE_ID_RE.match(item)
        if m:
            vendor, device = m.group(1).lower(), m.group(2).lower()
            found = sorted(b for b, d in by_bdf.items() if d.get("vendor_id") == vendor and d.get("device_id") == device
                           and (keep is None or keep(d)))
            if not found:
                missing.append(item)
            out.append((item, found))
            continue
        bdf = normalize_bdf(item)
        if bdf is None:
            bad.append(item)
        elif bdf not in by_bdf:
            missing.append(item)
        else:
            out.append((item, [bdf]))
    if bad:
        raise error("malformed device(s) %s: use a PCI address like 0000:41:00.0 (or 41:00.0), a vendor:device "
                    "ID like %s, or all_nvidia" % (", ".join(repr(b) for b in bad), example_id))
    if missing:
        raise error("device(s) not present on this host: %s (see lspci -Dnn)" % ", ".join(missing))
    return out


#: bytes read at most from one sysfs or procfs attribute: the kernel's show() fills at most one page, which is
#: 64 KiB on arm64 and ppc64 kernels built with 64 KiB pages.  /proc/cmdline (a few KiB), version, pid and
#: os-release files and a function's PCI config space (4 KiB) are well within it.
ATTR_LIMIT = 64 * 1024

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


class NodeFileError(OSError, HostError):
    """A node file that is not read: not a regular file, larger than its bound, or failing to read.  ``str()`` is
    a sentence naming the path."""


def write_attr(path, value):
    """Write a sysfs attribute in one write, as the kernel takes it. Something there that is not a regular file
    (sysfs attributes are), such as a FIFO or a device node in a node-root tree, is never opened: OSError instead
    of a run that hangs or arms a device."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        raise OSError(errno.EINVAL, "is %s, not a regular file" % file_kind(mode), path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
                 | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "is not a regular file", path)
        os.write(fd, value.encode("utf-8"))
    finally:
        os.close(fd)


def file_kind(mode):
    """What a file of ``st_mode`` ``mode`` that is not a regular file is, in words ("a FIFO", "a directory"...)."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _not_regular(path, mode):
    if stat.S_ISREG(mode):
        return None
    return NodeFileError("%s is %s, not a regular file; not read" % (path, file_kind(mode)))


def read_node_file(path, limit=ATTR_LIMIT, prefix=False):
    """The bytes of the node file ``path``; None when it does not exist.

    Raises :class:`NodeFileError` for anything but a regular file (never opened), for a file of more than
    ``limit`` bytes (``prefix``: its first ``limit`` bytes are returned instead, for files of which only the
    beginning is needed) and for a failing read.  Never blocks.
    """
    try:
        problem = _not_regular(path, os.stat(path).st_mode)
        if problem:
            raise problem
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except NodeFileError:
        raise
    except OSError as exc:
        raise NodeFileError("cannot read %s: %s" % (path, exc.strerror or exc))
    try:
        problem = _not_regular(path, os.fstat(fd).st_mode)
        if problem:
            raise problem
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except NodeFileError:
        raise
    except OSError as exc:
        raise NodeFileError("cannot read %s: %s" % (path, exc.strerror or exc))
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if size > limit:
        if not prefix:
            raise NodeFileError("%s holds more than %d bytes, the most read from such a file; not read" % (path, limit))
        data = data[:limit]
    return data


def read_node_text(path, warnings=None, limit=ATTR_LIMIT, prefix=False):
    """The text of the node file ``path`` (UTF-8, bytes that are not replaced), or None when it does not exist
    or is not read (:func:`read_node_file`): then, with ``warnings`` given, the sentence saying why is added."""
    try:
        data = read_node_file(path, limit, prefix)
    except NodeFileError as exc:
        if warnings is not None:
            warnings.append(str(exc))
        return None
    return None if data is None else data.decode("utf-8", "replace")


def read_attr(path, warnings=None, limit=ATTR_LIMIT):
    """One sysfs/procfs attribute, stripped; None when absent or not read (see :func:`read_node_text`)."""
    text = read_node_text(path, warnings, limit)
    return None if text is None else text.strip()


def link_name(path):
    """Basename of a symlink's target (sysfs ``driver``/``iommu_group`` links)."""
    try:
        return os.path.basename(os.readlink(path))
    except OSError:
        return None


def _hex(value, width):
    if value is None:
        return None
    value = value.lower()
    if value.startswith("0x"):
        value = value[2:]
    return value.zfill(width)


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def read_pci_device(root, bdf, warnings=None):
    """Everything the collection needs to know about one PCI function."""
    base = sysfs_path(root, "sys/bus/pci/devices", bdf)

    def attr(name):
        return read_attr(os.path.join(base, name), warnings)

    vendor = _hex(attr("vendor"), 4)
    device = _hex(attr("device"), 4)
    klass = _hex(attr("class"), 6)
    override = attr("driver_override")
    numa = _int(attr("numa_node"))
    boot_vga = attr("boot_vga")
    physfn = link_name(os.path.join(base, "physfn"))
    total_vfs = _int(attr("sriov_totalvfs"))
    return {
        "bdf": bdf,
        "vendor_id": vendor,
        "device_id": device,
        "class_id": klass,
        "pci_id": "%s:%s" % (vendor, device) if vendor and device else None,
        "subsystem_vendor_id": _hex(attr("subsystem_vendor"), 4),
        "subsystem_device_id": _hex(attr("subsystem_device"), 4),
        "revision": _hex(attr("revision"), 2),
        "driver": link_name(os.path.join(base, "driver")),
        "driver_override": None if override in (None, "", "(null)") else override,
        "iommu_group": link_name(os.path.join(base, "iommu_group")),
        "numa_node": numa if numa is not None and numa >= 0 else None,
        "boot_vga": boot_vga == "1",
        "modalias": attr("modalias"),
        "link": {
            "current_speed": attr("current_link_speed"),
            "current_width": _int(attr("current_link_width")),
            "max_speed": attr("max_link_speed"),
            "max_width": _int(attr("max_link_width")),
        },
        "sriov": {
            "total_vfs": total_vfs,
            "num_vfs": _int(attr("sriov_numvfs")),
        } if total_vfs is not None else None,
        "physfn": physfn,
        "reset_method": attr("reset_method"),
    }


def list_bdfs(root):
    directory = sysfs_path(root, "sys/bus/pci/devices")
    try:
        return sorted(n for n in os.listdir(directory) if normalize_bdf(n))
    except OSError:
        return []


def read_pci_devices(root="/", vendor=None, warnings=None):
    """All PCI functions (optionally only one vendor, e.g. ``"10de"``), sorted by BDF."""
    out = []
    for bdf in list_bdfs(root):
        if vendor is not None:
            v = _hex(read_attr(sysfs_path(root, "sys/bus/pci/devices", bdf, "vendor"), warnings), 4)
            if v != vendor:
                continue
        out.append(read_pci_device(root, bdf, warnings))
    return out


def read_iommu_groups(root="/"):
    """``{group: [bdf, ...]}`` from /sys/kernel/iommu_groups."""
    base = sysfs_path(root, "sys/kernel/iommu_groups")
    groups = {}
    try:
        names = os.listdir(base)
    except OSError:
        return groups
    for name in names:
        try:
            members = os.listdir(os.path.join(base, name, "devices"))
        except OSError:
            members = []
        groups[name] = sorted(members)
    return groups


def is_bridge(class_id):
    """PCI bridges (class 0x06 except 0x0680 'other bridge', which NVSwitches use)."""
    return bool(class_id) and class_id.startswith("06") and not class_id.startswith("0680")


def is_gpu_class(class_id):
    return bool(class_id) and class_id.startswith("03")


def classify_nvidia(dev):
    """'gpu' (display 0x03xx), 'nvswitch' (bridge 0x0680), 'audio' (0x0403) or 'other'."""
    cls = dev.get("class_id") or ""
    if cls.startswith("03"):
        return "gpu"
    if cls.startswith("0680"):
        return "nvswitch"
    if cls.startswith("0403"):
        return "audio"
    return "other"
