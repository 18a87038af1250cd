# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""NVIDIA driver lifecycle planning: what to install, pin, blacklist and enable on a host.

PRIVATE: may change at any time; not for use outside gpuops.nvidia.

Pure functions: :func:`plan` takes the host's facts (the ``ansible_facts.gpu`` shape that
``gpu_facts`` returns, plus the installed package list and the MOK state) and the user's
request, and returns a plan dict.  Nothing here runs a command or imports Ansible; the
readers at the bottom (:func:`read_mok`, :func:`device_holders`) take a ``root`` path like
every other reader in the collection.
"""
from __future__ import annotations

import os
import re

from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import InputError
from ansible_collections.gpuops.nvidia.plugins.module_utils._pci import ATTR_LIMIT, NodeFileError, read_node_file, read_node_text

MANAGED = "# Managed by gpuops.nvidia.driver -- do not edit.\n"
BLACKLIST_PATH = "/etc/modprobe.d/gpuops-nvidia-blacklist.conf"
BLACKLIST_CONTENT = (
    MANAGED
    + "# nouveau (and the Rust nova_core/nova_drm of kernels >= 6.15) must not claim the GPUs.\n"
    "blacklist nouveau\n"
    "options nouveau modeset=0\n"
    "blacklist nova_core\n"
    "blacklist nova_drm\n"
)
PIN_PATH = "/etc/apt/preferences.d/gpuops-nvidia-driver"
# Every package of the driver family (the toolkit's have no version on a driver branch, so the pin
# never touches them).
PIN_PACKAGES = "/^(nvidia-|libnvidia-|libcuda1|libnvcuvid1|libnvoptix1|firmware-nvidia-gsp|xserver-xorg-video-nvidia|cuda-drivers)/"
DKMS_MOK_KEY = "/var/lib/dkms/mok.key"
DKMS_MOK_CERT = "/var/lib/dkms/mok.pub"
DKMS_SIGNING_CONF = "/etc/dkms/framework.conf.d/gpuops-mok.conf"
KEYRING_DIR = "/etc/apt/keyrings"
CUDA_REPO_BASE = "https://developer.download.nvidia.com/compute/cuda/repos"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEBIAN_SECURITY_MIRROR = "http://deb.debian.org/debian-security"
DEBIAN_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
MOK_GUID = "605dab50-e046-4300-abb6-3dd810dd8b23"
MOK_KEY_PATHS = {
    "debian": ("var/lib/dkms/mok.pub",),
    "ubuntu": ("var/lib/shim-signed/mok/MOK.der", "var/lib/dkms/mok.pub"),
    "rhel": ("var/lib/dkms/mok.pub",),
}

# Supported releases: (family, major) -> facts about the release.
RELEASES = {
    ("ubuntu", "22.04"): {"codename": "jammy", "cuda": "ubuntu2204"},
    ("ubuntu", "24.04"): {"codename": "noble", "cuda": "ubuntu2404"},
    ("debian", "12"): {"codename": "bookworm", "cuda": "debian12", "distro_branch": "535",
                       # bookworm's nvidia-open-kernel-dkms (535.261.03) lags nvidia-driver (535.309.01):
                       # apt cannot install the open module with the current driver.
                       "distro_open": False},
    ("debian", "13"): {"codename": "trixie", "cuda": "debian13", "distro_branch": "550", "distro_open": True},
    ("rhel", "8"): {"cuda": "rhel8", "streams": True, "key": "D42D0685.pub"},
    ("rhel", "9"): {"cuda": "rhel9", "streams": True, "key": "D42D0685.pub"},
    ("rhel", "10"): {"cuda": "rhel10", "streams": False, "key": "CDF6BA43.pub"},
}
RHEL_IDS = ("rhel", "rocky", "almalinux", "centos", "ol", "fedora-asahi-remix")
# Canonical kernel flavours for which linux-restricted-modules ships signed precompiled modules.
UBUNTU_SIGNED_FLAVOURS = ("generic", "generic-64k", "lowlatency", "aws", "azure", "gcp", "oracle", "nvidia",
                          "nvidia-64k", "ibm", "gke", "gkeop")
UBUNTU_RELEASE_RE = re.compile(r"\d+\.\d+\.\d+-\d+-(?P<flavour>[a-z][a-z0-9-]*)")
DEBIAN_RELEASE_RE = re.compile(r"\d+\.\d+\.\d+-\d+(?:\+\w+)?-(?P<flavour>[a-z][a-z0-9-]*)")
# Installed packages that move with the driver and must be held together (NVML must match the module).
HOLD_RE = {
    "apt": re.compile(r"^(nvidia-|libnvidia-|libcuda1|libnvcuvid1|libnvoptix1|libnvidia|firmware-nvidia-gsp"
                      r"|xserver-xorg-video-nvidia|cuda-drivers|libxnvctrl0)"),
    "dnf": re.compile(r"^(nvidia-|libnvidia-|kmod-nvidia|cuda-drivers|dkms-nvidia|xorg-x11-nvidia)"),
}
# ... except what other roles own, or what must follow the kernel.
HOLD_EXCLUDE_RE = re.compile(r"^(nvidia-container|libnvidia-container|nvidia-docker|nvidia-mig|nvidia-ctk"
                             r"|linux-|kernel-)")
TURING_CC = (7, 5)
OPEN_DEFAULT_BRANCH = 560      # NVIDIA made the open modules the default with R560
LAST_PRE_TURING_BRANCH = 580   # R580 is the last branch for Maxwell, Pascal and Volta
BLACKWELL_CC = (10, 0)         # Blackwell and newer: open modules only


class DriverPlanError(InputError):
    """The request cannot be met on this host; ``remediation`` says what to do."""

    def __init__(self, msg, remediation=None):
        super().__init__(msg, remediation=remediation)


# --- input checks ------------------------------------------------------------------

VERSION_RE = re.compile(r"^[0-9]{3}\.[0-9]{1,3}(?:\.[0-9]{1,3})?\Z")
# a URL as it goes into a .sources / .repo file: no whitespace, quotes or control characters
URL_RE = re.compile(r"^(?:https?|ftp|file)://[^\s\"'<>\\`\x00-\x1f\x7f]+\Z")
ARCH_RE = re.compile(r"^[A-Za-z0-9_]+\Z")
# what `uname -r` prints: never whitespace or shell metacharacters
SAFE_PATH_RE = re.compile(r"^/[A-Za-z0-9._+/-]+\Z")
KERNEL_RELEASE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+~-]*\Z")
_FACT_SECTIONS = ("os", "kernel", "driver")
_FACT_STRINGS = {"os": ("id", "version_id", "id_like"), "kernel": ("release",),
                 "driver": ("version", "kernel_module_type")}


def check_facts(gpu):
    """Refuse ``ansible_facts.gpu`` (or a hand-written stand-in) of the wrong shape; DriverPlanError lists every
    problem.  Strings where gpu_facts returns strings, mappings and lists of mappings where it returns them."""
    problems = []
    if not isinstance(gpu, dict):
        raise DriverPlanError("gpu_facts must be ansible_facts.gpu (a mapping), got %r" % (gpu,))
    for section in _FACT_SECTIONS:
        value = gpu.get(section)
        if value is None:
            continue
        if not isinstance(value, dict):
            problems.append("gpu_facts.%s must be a mapping, got %r" % (section, value))
            continue
        for key in _FACT_STRINGS[section]:
            v = value.get(key)
            if v is not None and not isinstance(v, str):
                problems.append("gpu_facts.%s.%s must be a string (quote it), got %r" % (section, key, v))
    kernel = gpu.get("kernel") if isinstance(gpu.get("kernel"), dict) else {}
    release = kernel.get("release")
    if isinstance(release, str) and release and not KERNEL_RELEASE_RE.match(release):
        problems.append("gpu_facts.kernel.release %r is not a kernel release (what `uname -r` prints)" % release)
    driver = gpu.get("driver") if isinstance(gpu.get("driver"), dict) else {}
    if isinstance(driver.get("version"), str) and not re.match(r"^[0-9]+\.[0-9]+(?:\.[0-9]+)?\Z", driver["version"]):
        problems.append("gpu_facts.driver.version %r is not a driver version like 580.95.05" % driver["version"])
    if driver.get("kernel_module_type") not in (None, "open", "proprietary"):
        problems.append("gpu_facts.driver.kernel_module_type must be open or proprietary, got %r"
                        % (driver.get("kernel_module_type"),))
    for section in ("devices", "nvswitches"):
        value = gpu.get(section)
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(d, dict) for d in value):
            problems.append("gpu_facts.%s must be a list of mappings (one per PCI function), got %r" % (section, value))
    if problems:
        raise DriverPlanError("; ".join(problems), "pass ansible_facts.gpu as gpuops.nvidia.gpu_facts returns it, "
                              "or leave gpu_facts out to gather the facts on the node")
    return gpu


def check_request(req):
    """Refuse request values that would end up in package names or repository files malformed."""
    for key in ("repo_url", "repo_key_url", "debian_mirror", "debian_security_mirror"):
        value = req.get(key)
        if value and not (isinstance(value, str) and URL_RE.match(value)):
            raise DriverPlanError("%s must be an http(s), ftp or file URL without spaces, quotes or control characters, "
                                  "got %r" % (key, value))
    for key in ("mok_key", "mok_cert"):
        value = req.get(key)
        # DKMS sources framework.conf.d as shell: only plain absolute paths get there
        if value and not (isinstance(value, str) and SAFE_PATH_RE.match(value)):
            raise DriverPlanError("driver_%s must be an absolute path of letters, digits and . _ - + / (DKMS reads it as "
                                  "shell), got %r" % (key, value))
    if bool(req.get("mok_key")) != bool(req.get("mok_cert")):
        raise DriverPlanError("driver_mok_key and driver_mok_cert go together (the private key and its DER certificate)")
    arch = req.get("arch")
    if arch is not None and not (isinstance(arch, str) and ARCH_RE.match(arch)):
        raise DriverPlanError("arch must be a machine name like x86_64 or aarch64, got %r" % (arch,))


# --- small parsers ---------------------------------------------------------------

def os_family(os_facts):
    """('ubuntu'|'debian'|'rhel', major version string) from os-release facts."""
    os_id = (os_facts.get("id") or "").lower()
    like = (os_facts.get("id_like") or "").lower().split()
    version = os_facts.get("version_id") or ""
    if os_id == "ubuntu":
        return "ubuntu", version
    if os_id == "debian":
        return "debian", version.split(".")[0]
    if os_id in RHEL_IDS or "rhel" in like:
        return "rhel", version.split(".")[0]
    if "ubuntu" in like:
        return "ubuntu", version
    if "debian" in like:
        return "debian", version.split(".")[0]
    return os_id or None, version


def parse_cc(value):
    """'9.0' -> (9, 0); None when unknown."""
    if not value:
        return None
    try:
        major, minor = str(value).split(".", 1)
        return int(major), int(minor)
    except ValueError:
        return None


def upstream_version(pkg_version):
    """Driver version inside a package version: '1:535.309.01-0+deb12u1' -> '535.309.01'."""
    if not pkg_version:
        return None
    ver = pkg_version.split(":", 1)[-1]
    m = re.match(r"(\d+\.\d+(?:\.\d+)?)", ver)
    return m.group(1) if m else None


def version_matches(installed, branch, version=None):
    if not installed:
        return False
    if version:
        return installed == version
    return installed.split(".")[0] == str(branch)


def kernel_flavour(release, family):
    rex = UBUNTU_RELEASE_RE if family == "ubuntu" else DEBIAN_RELEASE_RE
    m = rex.fullmatch(release or "")
    return m.group("flavour") if m else None


def cuda_arch(arch):
    return {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "sbsa", "arm64": "sbsa"}.get(arch or "x86_64", arch)


# --- decisions ---------------------------------------------------------------------

def resolve_module_type(requested, branch, ccs):
    """(type, reason) for kernel_module_type auto|open|proprietary against the GPUs' compute capabilities."""
    known = [cc for cc in ccs if cc is not None]
    oldest = min(known) if known else None
    newest = max(known) if known else None
    branch_n = int(branch) if str(branch).isascii() and str(branch).isdigit() else 0
    if oldest is not None and oldest < TURING_CC and branch_n > LAST_PRE_TURING_BRANCH:
        raise DriverPlanError("GPUs with compute capability %d.%d (before Turing) are not supported by branch %s"
                              % (oldest + (branch,)),
                              "use driver_branch 580 or older (R580 is the last branch for Maxwell, Pascal and Volta)")
    if requested == "open":
        if oldest is not None and oldest < TURING_CC:
            raise DriverPlanError("open kernel modules need Turing (compute capability 7.5) or newer; this host has %d.%d"
                                  % oldest, "set driver_kernel_module_type: proprietary (or auto)")
        return "open", "requested"
    if requested == "proprietary":
        if newest is not None and newest >= BLACKWELL_CC:
            raise DriverPlanError("Blackwell and newer GPUs (compute capability %d.%d) only work with the open kernel modules"
                                  % newest, "set driver_kernel_module_type: open (or auto)")
        return "proprietary", "requested"
    if oldest is None:
        if branch_n >= OPEN_DEFAULT_BRANCH:
            return "open", "no GPU facts; open is NVIDIA's default from R%d" % OPEN_DEFAULT_BRANCH
        return "proprietary", "no GPU facts; proprietary is the default before R%d" % OPEN_DEFAULT_BRANCH
    if oldest >= TURING_CC:
        return "open", "every GPU is Turing (7.5) or newer"
    return "proprietary", "a GPU older than Turing (compute capability %d.%d)" % oldest


def select_holds(installed, manager):
    """Installed package names that must be held with the driver (sorted)."""
    rex = HOLD_RE[manager]
    return sorted(n for n in installed if rex.match(n) and not HOLD_EXCLUDE_RE.match(n))


def _apt_sources(url, suites, components, key):
    lines = ["Types: deb", "URIs: %s" % url, "Suites: %s" % " ".join(suites)]
    if components:
        lines.append("Components: %s" % " ".join(components))
    lines.append("Signed-By: %s" % key)
    return "\n".join(lines) + "\n"


def repository(family, rel, source, arch, req):
    """Repository definition (or None when the distro's default sources have the packages)."""
    if source == "cuda_repo":
        url = req.get("repo_url") or "%s/%s/%s/" % (CUDA_REPO_BASE, rel["cuda"], cuda_arch(arch))
        if not url.endswith("/"):
            url += "/"
        key_url = req.get("repo_key_url") or url + rel.get("key", "3bf863cc.pub")
        if family == "rhel":
            name = "gpuops-cuda-%s" % rel["cuda"]
            content = MANAGED + "[%s]\nname=NVIDIA CUDA %s %s (gpuops)\nbaseurl=%s\nenabled=1\ngpgcheck=1\ngpgkey=%s\n" % (
                name, rel["cuda"], cuda_arch(arch), url, key_url)
            return {"kind": "dnf", "name": name, "path": "/etc/yum.repos.d/%s.repo" % name, "content": content,
                    "url": url, "key_url": key_url, "key_path": None, "preferences": None}
        host = re.sub(r"^[a-z]+://([^/:]+).*", r"\1", url, flags=re.S)
        key_path = "%s/gpuops-cuda.asc" % KEYRING_DIR
        content = MANAGED + _apt_sources(url, ["/"], [], key_path)
        prefs = MANAGED + "Package: *\nPin: origin %s\nPin-Priority: 600\n" % host
        return {"kind": "apt", "name": "gpuops-cuda", "path": "/etc/apt/sources.list.d/gpuops-cuda.sources",
                "content": content, "url": url, "key_url": key_url, "key_path": key_path,
                "preferences": {"path": "/etc/apt/preferences.d/gpuops-cuda", "content": prefs}}
    if family == "debian":
        mirror = req.get("debian_mirror") or DEBIAN_MIRROR
        security = req.get("debian_security_mirror") or DEBIAN_SECURITY_MIRROR
        comps = ["contrib", "non-free", "non-free-firmware"]
        code = rel["codename"]
        content = MANAGED + _apt_sources(mirror, [code, code + "-updates"], comps, DEBIAN_KEYRING)
        content += "\n" + _apt_sources(security, [code + "-security"], comps, DEBIAN_KEYRING)
        return {"kind": "apt", "name": "gpuops-debian-nonfree", "path": "/etc/apt/sources.list.d/gpuops-debian-nonfree.sources",
                "content": content, "url": mirror, "key_url": None, "key_path": None, "preferences": None}
    return None


def _apt_pin(pkgs, version, versioned):
    return ["%s=%s-*" % (p, version) if version and p in versioned else p for p in pkgs]


def packages(family, rel, source, branch, version, mtype, host, req):
    """Package selection: dict with packages, specs, headers, build, module_stream, fabricmanager, notes."""
    release = host.get("kernel_release")
    server = "-server" if req.get("ubuntu_server", True) else ""
    opn = "-open" if mtype == "open" else ""
    fm = host.get("fabricmanager")
    notes = []
    out = {"packages": [], "specs": [], "headers": [], "build": "dkms", "module_stream": None,
           "fabricmanager_packages": [], "notes": notes, "module_names": ["nvidia"], "versioned": []}
    precompiled = req.get("precompiled", "auto")
    if family == "ubuntu" and source == "distro":
        flavour = kernel_flavour(release, "ubuntu")
        can_pre = flavour in UBUNTU_SIGNED_FLAVOURS
        if precompiled == "always" and not can_pre:
            raise DriverPlanError("no Canonical precompiled NVIDIA modules for kernel %s" % release,
                                  "boot a Canonical kernel flavour (%s) or set driver_precompiled: auto"
                                  % ", ".join(UBUNTU_SIGNED_FLAVOURS[:3]))
        use_pre = can_pre and precompiled != "never"
        base = "%s%s%s" % (branch, server, opn)
        if use_pre:
            out["build"] = "precompiled"
            kmods = ["linux-modules-nvidia-%s-%s" % (base, release), "linux-modules-nvidia-%s-%s" % (base, flavour)]
            user = ["nvidia-headless-no-dkms-%s" % base, "nvidia-utils-%s%s" % (branch, server)]
            notes.append("Canonical signed precompiled modules for %s; the -%s meta package follows kernel updates"
                         % (release, flavour))
        else:
            kmods = []
            user = ["nvidia-headless-%s" % base, "nvidia-utils-%s%s" % (branch, server)]
            out["headers"] = ["linux-headers-%s" % release]
            if flavour:
                out["headers"].append("linux-headers-%s" % flavour)
        if not req.get("headless", True):
            user[0] = "nvidia-driver-%s" % base
        if fm:
            out["fabricmanager_packages"] = ["nvidia-fabricmanager-%s" % branch, "libnvidia-nscq-%s" % branch]
        versioned = set(user) | set(out["fabricmanager_packages"])
        out["versioned"] = sorted(versioned)
        out["packages"] = kmods + user + out["fabricmanager_packages"]
        out["specs"] = kmods + _apt_pin(user + out["fabricmanager_packages"], version, versioned)
    elif family == "debian" and source == "distro":
        distro_branch = rel["distro_branch"]
        if str(branch) != distro_branch:
            raise DriverPlanError("Debian %s non-free ships driver branch %s, not %s" % (host["os_major"], distro_branch, branch),
                                  "set driver_branch: \"%s\", or driver_source: cuda_repo for branch %s" % (distro_branch, branch))
        if mtype == "open" and not rel["distro_open"]:
            raise DriverPlanError("Debian %s's nvidia-open-kernel-dkms does not match its nvidia-driver version, so apt cannot "
                                  "install the open module" % host["os_major"],
                                  "set driver_kernel_module_type: proprietary, or driver_source: cuda_repo for open modules")
        if fm:
            raise DriverPlanError("Debian non-free has no nvidia-fabricmanager, needed on this NVSwitch system",
                                  "set driver_source: cuda_repo")
        kmod = "nvidia-open-kernel-dkms" if mtype == "open" else "nvidia-kernel-dkms"
        if req.get("headless", True):
            # compute-only: nvidia-driver would pull Xorg, Mesa and LLVM (144 packages on a minimal
            # bookworm instead of 68)
            user = [kmod, "nvidia-smi", "libcuda1", "nvidia-persistenced", "firmware-misc-nonfree"]
            out["versioned"] = [kmod, "nvidia-smi", "libcuda1"]
        else:
            user = ["nvidia-driver", kmod, "nvidia-smi", "nvidia-persistenced", "firmware-misc-nonfree"]
            out["versioned"] = ["nvidia-driver", kmod, "nvidia-smi"]
        out["packages"] = user
        out["specs"] = _apt_pin(user, version, set(out["versioned"]))
        flavour = kernel_flavour(release, "debian")
        out["headers"] = ["linux-headers-%s" % release] + (["linux-headers-%s" % flavour] if flavour else [])
        out["module_names"] = ["nvidia", "nvidia-current", "nvidia-current-open"]
        notes.append("Debian renames the module nvidia-current (alias nvidia); DKMS rebuilds it for new kernels "
                     "because the linux-headers-<flavour> meta package follows kernel updates")
    elif family in ("ubuntu", "debian"):  # CUDA repository
        main = "nvidia-open-%s" % branch if mtype == "open" else "cuda-drivers-%s" % branch
        if fm:
            out["fabricmanager_packages"] = ["nvidia-fabricmanager-%s" % branch]
        pers = ["nvidia-persistenced"] if req.get("persistenced", True) else []
        out["packages"] = [main] + pers + out["fabricmanager_packages"]
        out["versioned"] = list(out["packages"])
        out["specs"] = _apt_pin(out["packages"], version, set(out["packages"]))
        flavour = kernel_flavour(release, family)
        out["headers"] = ["linux-headers-%s" % release] + (["linux-headers-%s" % flavour] if flavour else [])
    elif family == "rhel":
        headers = ["kernel-devel-%s" % release, "kernel-headers-%s" % release] if release else []
        out["headers"] = headers
        notes.append("DKMS needs the dkms package from EPEL on RHEL-family hosts")
        if rel["streams"]:
            stream = "%s-open" % branch if mtype == "open" else "%s-dkms" % branch
            profile = "fm" if fm else "default"
            out["module_stream"] = "nvidia-driver:%s" % stream
            out["packages"] = ["@nvidia-driver:%s/%s" % (stream, profile)]
            out["specs"] = list(out["packages"])
            out["versioned"] = ["nvidia-driver", "kmod-nvidia-open-dkms" if mtype == "open" else "kmod-nvidia-latest-dkms"]
            if version:
                notes.append("an exact version on a module stream is enforced by dnf versionlock after install")
        else:
            main = "nvidia-open" if mtype == "open" else "cuda-drivers"
            pkgs = [main] + (["nvidia-persistenced"] if req.get("persistenced", True) else []) \
                + (["nvidia-fabric-manager"] if fm else [])
            out["packages"] = pkgs
            out["versioned"] = list(pkgs)
            out["specs"] = ["%s-%s" % (p, version) if version else "%s-%s.*" % (p, branch) for p in pkgs]
            notes.append("RHEL 10 has no module streams: the branch is pinned by package version and versionlock")
    return out


def pin_preferences(branch, version):
    """apt preferences that keep every driver package on ``branch`` (or exactly ``version``)."""
    want = "%s-*" % version if version else "%s.*" % branch
    return (MANAGED + "# The driver family stays on %s: a newer branch in any source is never picked.\n"
            "Package: %s\nPin: version %s\nPin-Priority: 1001\n" % (version or "branch " + branch, PIN_PACKAGES, want))


def release_key(release):
    """Sort key for kernel releases ("6.1.0-50-cloud-amd64" < "6.1.0-51-cloud-amd64" < "6.12.0-1-amd64")."""
    return [(0, int(p), "") if p.isascii() and p.isdigit() else (1, 0, p) for p in re.split(r"[.\-+~_]", release or "")]


def target_kernel(running, installed, requested=None):
    """(release, note): the kernel whose module the driver is built for.

    ``requested`` wins (it must be installed when the root lists any kernel); otherwise the running
    kernel when it is installed in the root (a normal host), else the newest installed kernel: a
    chroot or an image being built runs on its builder's kernel, which is not the one it will boot.
    """
    installed = sorted(set(installed or ()), key=release_key)
    if requested:
        if not KERNEL_RELEASE_RE.match(requested):
            raise DriverPlanError("driver_kernel_release %r is not a kernel release (what `uname -r` prints)" % requested)
        if installed and requested not in installed:
            raise DriverPlanError("driver_kernel_release %s is not installed here (installed: %s)"
                                  % (requested, ", ".join(installed)),
                                  "install linux-image-%s first, or leave driver_kernel_release empty" % requested)
        return requested, "building for the requested kernel %s" % requested
    if not installed or running in installed:
        return running, None
    newest = installed[-1]
    return newest, ("the running kernel %s is not installed in this root (a chroot or an image being built): "
                    "building for its newest kernel %s" % (running, newest))


def signing_plan(build, family, mok, req):
    """DKMS module signing: which key and certificate, and whether the role generates them."""
    if build != "dkms" or not req.get("secure_boot_mok"):
        return {"enabled": False, "key": None, "cert": None, "generate": False, "conf": None}
    key = req.get("mok_key") or DKMS_MOK_KEY
    cert = req.get("mok_cert") or DKMS_MOK_CERT
    given = bool(req.get("mok_key"))
    conf = (MANAGED + "# DKMS signs the modules it builds with this key (Secure Boot MOK).\n"
            "mok_signing_key=%s\nmok_certificate=%s\n" % (key, cert))
    return {"enabled": True, "key": key, "cert": cert, "generate": not given and not (mok or {}).get("key_present"),
            "conf": {"path": DKMS_SIGNING_CONF, "content": conf}}


def secure_boot_decision(enabled, build, mok, req):
    """How modules will load under Secure Boot, or DriverPlanError with remediation."""
    mok = mok or {}
    out = {"enabled": enabled, "strategy": "not-needed", "mok_key": mok.get("key_path"),
           "mok_enrolled": mok.get("enrolled"), "instructions": None}
    cert = req.get("mok_cert") or mok.get("key_path") or DKMS_MOK_CERT
    if not enabled:
        if req.get("secure_boot_mok") and build == "dkms":
            out["strategy"] = "dkms-signed-enrol-planned"
            out["mok_key"] = cert
            out["instructions"] = (
                "Secure Boot is %s here, so nothing is enrolled now; DKMS signs the module with %s. Before turning "
                "Secure Boot on (or on the first boot of an image built here), enrol it: `mokutil --import %s`, "
                "reboot, confirm 'Enroll MOK' in MokManager on the console, then check `mokutil --test-key %s`."
                % ("off" if enabled is False else "unknown (no EFI variables: a chroot, an image or BIOS boot)",
                   cert, cert, cert))
        return out
    if build == "precompiled":
        out["strategy"] = "precompiled-signed"
        return out
    if mok.get("enrolled"):
        out["strategy"] = "dkms-mok-enrolled"
        return out
    key = cert
    steps = ("DKMS signs the module with %s; enrol it once: `mokutil --import %s` (choose a one-time password), "
             "reboot, pick 'Enroll MOK' in the blue MokManager screen on the console and type that password. "
             "Check with `mokutil --test-key %s`." % (key, key, key))
    if req.get("secure_boot_mok"):
        out["strategy"] = "dkms-mok-enrol"
        out["instructions"] = steps
        return out
    raise DriverPlanError("Secure Boot is on, no signed precompiled module exists for this host and the DKMS signing key "
                          "is not enrolled: a DKMS-built module would not load",
                          "either set driver_secure_boot_mok: true and enrol the key (%s), or use Ubuntu's Canonical "
                          "kernel with driver_source: distro (signed precompiled modules), or disable Secure Boot" % steps)


def plan(host, req):
    """Plan the driver for ``host`` (see :func:`host_from_facts`) and ``req`` (the user's request).

    Returns a dict; raises DriverPlanError when the request cannot be met.
    """
    family, major = host["os_family"], host["os_major"]
    rel = RELEASES.get((family, major))
    if rel is None:
        raise DriverPlanError("unsupported OS %s %s" % (host.get("os_id"), host.get("os_version")),
                              "supported: Ubuntu 22.04/24.04, Debian 12/13, RHEL-family 8/9/10")
    state = req.get("state", "present")
    source = req.get("source") or "auto"
    if source == "auto":
        source = "cuda_repo" if family == "rhel" else "distro"
    if family == "rhel" and source == "distro":
        raise DriverPlanError("RHEL-family distributions do not ship the NVIDIA driver", "set driver_source: cuda_repo")
    check_request(req)
    branch = str(req.get("branch") or "")
    version = req.get("version") or None
    if version and not VERSION_RE.match(str(version)):
        raise DriverPlanError("driver_version must be a driver version like \"580.95.05\", got %r" % (version,))
    if version and not branch:
        branch = version.split(".")[0]
    if not re.fullmatch(r"[0-9]{3}", branch):
        raise DriverPlanError("driver_branch must be a driver branch like \"580\", got %r" % branch)
    running = host.get("kernel_release")
    kernel, kernel_note = target_kernel(running, host.get("installed_kernels"), req.get("kernel_release"))
    if kernel != running:
        host = dict(host, kernel_release=kernel, headers_present=kernel in (host.get("kernels_with_headers") or ()))
    if state == "present" and family in ("ubuntu", "debian") and not host.get("kernel_release"):
        raise DriverPlanError("the running kernel's release is unknown (no kernel.release in the facts, nothing in "
                              "/proc/sys/kernel/osrelease under the root): the plan needs it for the kernel headers and "
                              "module packages (linux-headers-<release>)",
                              "gather gpu_facts with the kernel subset on the node (or leave gpu_facts out)")
    if version and version.split(".")[0] != branch:
        raise DriverPlanError("driver_version %s is not on branch %s" % (version, branch))
    manager = "dnf" if family == "rhel" else "apt"
    nvswitch = bool(host.get("nvswitches"))
    fm_req = req.get("fabricmanager", "auto")
    host = dict(host, fabricmanager=nvswitch if fm_req == "auto" else bool(fm_req))
    requested_type = req.get("kernel_module_type", "auto")
    mtype, mtype_reason = resolve_module_type(requested_type, branch, host.get("ccs") or [])
    newest = max([cc for cc in host.get("ccs") or [] if cc] or [(0, 0)])
    if (requested_type == "auto" and mtype == "open" and family == "debian" and source == "distro"
            and not rel.get("distro_open", True) and newest < BLACKWELL_CC):
        mtype, mtype_reason = "proprietary", ("auto: Debian %s non-free's open module does not match its driver; "
                                              "the proprietary module supports these GPUs" % major)
    loaded = host.get("driver_loaded") and host.get("driver_version")
    out = {
        "state": state, "os_family": family, "os_major": major, "package_manager": manager, "source": source,
        "branch": branch, "version": version, "kernel_module_type": mtype, "kernel_module_type_reason": mtype_reason,
        "kernel_release": host.get("kernel_release"), "running_kernel": running,
        "gpus": host.get("gpu_count", 0), "nvswitches": len(host.get("nvswitches") or []),
        "installed": {"loaded_version": host.get("driver_version") if host.get("driver_loaded") else None,
                      "loaded_type": host.get("driver_type") if host.get("driver_loaded") else None,
                      "packages": dict(host.get("installed") or {})},
        "blacklist": {"path": BLACKLIST_PATH, "content": BLACKLIST_CONTENT},
        "initramfs_command": ["dracut", "-f", "--regenerate-all"] if family == "rhel" else ["update-initramfs", "-u", "-k", "all"],
        "services": {"persistenced": {"name": "nvidia-persistenced", "enabled": bool(req.get("persistenced", True))},
                     "fabricmanager": {"name": "nvidia-fabricmanager", "enabled": host["fabricmanager"]}},
        "warnings": [], "changes": [], "reboot_reasons": [],
    }
    pk = packages(family, rel, source, branch, version, mtype, host, req)
    out.update({"packages": pk["packages"], "package_specs": pk["specs"], "headers": pk["headers"],
                "build": pk["build"], "module_stream": pk["module_stream"], "notes": pk["notes"],
                "fabricmanager_packages": pk["fabricmanager_packages"], "module_names": pk["module_names"],
                "versioned_packages": pk["versioned"]})
    out["repository"] = repository(family, rel, source, host.get("arch"), req)
    if kernel_note:
        out["notes"].append(kernel_note)
    out["pin"] = {"path": PIN_PATH if manager == "apt" else None,
                  "content": pin_preferences(branch, version) if manager == "apt" and state == "present" else None}
    out["signing"] = signing_plan(pk["build"], family, host.get("mok"), req)
    if out["signing"]["enabled"] and out["signing"]["generate"] and not req.get("mok_generate", True):
        raise DriverPlanError("driver_secure_boot_mok is on, no signing key exists (%s) and driver_mok_generate is false: "
                              "DKMS could not sign the module" % out["signing"]["key"],
                              "give driver_mok_key and driver_mok_cert (a key you enrol), or set driver_mok_generate: true")
    installed = host.get("installed") or {}
    held = set(host.get("held") or ())
    out["holds"] = select_holds(set(installed), manager) if state == "present" else []
    out["holds_missing"] = [p for p in out["holds"] if p not in held]
    out["holds_present"] = sorted(p for p in held if p in set(select_holds(set(installed) | held, manager)))
    out["unholds"] = out["holds_present"] if state == "absent" else []
    if state == "absent":
        return _plan_absent(out, host, installed, manager)

    # Is the request already met?
    loaded_ok = bool(loaded) and version_matches(host.get("driver_version"), branch, version) \
        and host.get("driver_type") == mtype
    needed = [p for p in pk["packages"] if not p.startswith("@")] + pk["versioned"]
    pkgs_present = bool(needed) and all(p in installed for p in needed)
    pkgs_ok = pkgs_present and all(version_matches(upstream_version(installed[p]), branch, version) for p in pk["versioned"])
    if loaded_ok:
        satisfied = True
        out["manage_packages"] = pkgs_present
        if not pkgs_present:
            out["notes"].append("the loaded driver %s (%s) satisfies the request and was not installed from these "
                                "packages (runfile, container or image): packages are left alone"
                                % (host["driver_version"], host["driver_type"]))
    else:
        satisfied = (not loaded) and pkgs_ok
        out["manage_packages"] = True
    out["satisfied"] = satisfied
    want = "%s%s (%s, %s)" % (branch, (" = " + version) if version else "", mtype, pk["build"])
    if not satisfied:
        if loaded:
            out["changes"].append("driver: replace loaded %s (%s) with %s" % (host["driver_version"], host["driver_type"], want))
            out["reboot_reasons"].append("driver %s loaded, %s requested" % (host["driver_version"], want))
        else:
            out["changes"].append("driver: install %s: %s" % (want, " ".join(pk["specs"])))
        if pk["build"] == "dkms" and family != "rhel" and not kernel_flavour(host.get("kernel_release"), family):
            out["warnings"].append("kernel %s is not a %s distribution kernel: %s probably does not exist and DKMS needs "
                                   "that kernel's build tree" % (host.get("kernel_release"), family,
                                                                 (pk["headers"] or ["its headers package"])[0]))
        if pk["headers"] and not host.get("headers_present"):
            out["changes"].append("headers: install %s" % " ".join(pk["headers"][:1]))
        if out["repository"]:
            out["changes"].append("repository: %s (%s)" % (out["repository"]["path"], out["repository"]["url"]))
        sb = secure_boot_decision(host.get("secure_boot"), pk["build"], host.get("mok"), req)
    else:
        sb = secure_boot_decision(False, pk["build"], host.get("mok"), req)
        sb["enabled"] = host.get("secure_boot")
        if host.get("secure_boot"):
            sb["strategy"] = "loaded"
    out["secure_boot"] = sb
    if sb["strategy"] == "dkms-mok-enrol":
        out["reboot_reasons"].append("MOK enrolment of %s (confirm in MokManager on the console)" % sb["mok_key"])
    if host.get("nouveau_loaded") or host.get("nova_core_loaded"):
        which = "nouveau" if host.get("nouveau_loaded") else "nova_core"
        out["changes"].append("blacklist: %s is loaded; blacklist it and regenerate the initramfs" % which)
        out["reboot_reasons"].append("%s holds the GPU" % which)
    if host["fabricmanager"] and not host.get("fabricmanager_running"):
        out["warnings"].append("NVSwitches present and nvidia-fabricmanager is not running: CUDA jobs will fail to "
                               "initialise until it runs with the driver's exact version")
    if satisfied:
        out["reboot_reasons"] = [r for r in out["reboot_reasons"] if "driver" not in r]
    return out


def _plan_absent(out, host, installed, manager):
    present = sorted(n for n in installed if HOLD_RE[manager].match(n) and not HOLD_EXCLUDE_RE.match(n))
    loaded = host.get("driver_loaded")
    # the driver family plus Canonical's precompiled module packages; never firmware-misc-nonfree or headers,
    # which other hardware and other DKMS modules may need
    kmods = [n for n in installed if re.match(r"^linux-(modules|objects|signatures)-nvidia-", n)]
    out["remove"] = sorted(set(present) | set(kmods))
    out["manage_packages"] = True
    out["satisfied"] = not out["remove"] and not loaded
    out["secure_boot"] = {"enabled": host.get("secure_boot"), "strategy": "not-needed", "mok_key": None,
                          "mok_enrolled": None, "instructions": None}
    if out["remove"]:
        out["changes"].append("driver: remove %s" % " ".join(out["remove"]))
    if out["unholds"]:
        out["changes"].append("holds: lift %s" % " ".join(out["unholds"]))
    if loaded:
        out["changes"].append("driver %s is loaded: it stays until the module is unloaded or the host reboots"
                              % host.get("driver_version"))
        out["reboot_reasons"].append("driver %s removed but still loaded" % host.get("driver_version"))
    return out


def host_from_facts(gpu, installed=None, mok=None, arch=None, held=None, kernels=None):
    """Flatten ``ansible_facts.gpu`` (gpu_facts with pci, kernel, driver) into :func:`plan`'s host dict."""
    os_facts = gpu.get("os") or {}
    family, major = os_family(os_facts)
    kernel = gpu.get("kernel") or {}
    driver = gpu.get("driver") or {}
    devices = gpu.get("devices") or []
    return {
        "os_id": os_facts.get("id"), "os_version": os_facts.get("version_id"), "os_family": family, "os_major": major,
        "arch": arch or "x86_64",
        "kernel_release": kernel.get("release"), "headers_present": kernel.get("headers_present"),
        "nouveau_loaded": kernel.get("nouveau_loaded"), "nova_core_loaded": kernel.get("nova_core_loaded"),
        "ccs": [parse_cc(d.get("compute_capability")) for d in devices],
        "gpu_count": len(devices), "device_ids": sorted(set(d.get("device_id") for d in devices)),
        "nvswitches": [d.get("bdf") for d in gpu.get("nvswitches") or []],
        "driver_loaded": bool(driver.get("loaded")), "driver_version": driver.get("version"),
        "driver_type": driver.get("kernel_module_type"),
        "fabricmanager_running": driver.get("fabricmanager_running"),
        "persistenced_running": driver.get("persistenced_running"),
        "secure_boot": gpu.get("secure_boot"),
        "installed": dict(installed or {}), "mok": mok or {}, "held": sorted(held or ()),
        "installed_kernels": list((kernels or ((), ()))[0]), "kernels_with_headers": list((kernels or ((), ()))[1]),
    }


# --- readers (take root) ----------------------------------------------------------------

def parse_installed(text, manager):
    """{name: version} of installed packages from dpkg-query/rpm output ('name<TAB>version<TAB>status')."""
    out = {}
    for line in (text or "").splitlines():
        parts = line.split("\t")
        if len(parts) < 2 or not parts[0]:
            continue
        if manager == "apt" and len(parts) > 2 and not parts[2].startswith("ii"):
            continue
        out[parts[0].split(":")[0]] = parts[1]
    return out


def parse_dpkg_status(text):
    """{name: version} of installed packages from /var/lib/dpkg/status text."""
    out = {}
    for stanza in (text or "").split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t"):
                continue
            key, sep, val = line.partition(":")
            if sep:
                fields[key.strip()] = val.strip()
        if fields.get("Package") and fields.get("Status", "").endswith(" installed") and "Version" in fields:
            out[fields["Package"]] = fields["Version"]
    return out


def parse_dpkg_held(text):
    """Names of packages whose dpkg selection is ``hold`` (apt-mark hold)."""
    held = set()
    for stanza in (text or "").split("\n\n"):
        name = status = None
        for line in stanza.splitlines():
            if line.startswith("Package:"):
                name = line.partition(":")[2].strip()
            elif line.startswith("Status:"):
                status = line.partition(":")[2].strip()
        if name and status and status.startswith("hold "):
            held.add(name)
    return held


#: bytes read at most from dpkg's status file: a few MiB on a server, tens of MiB on hosts with every package
DPKG_STATUS_LIMIT = 128 * 1024 * 1024
#: bytes read at most from dnf's versionlock list, the MOK certificate and the firmware's MOK list
SMALL_FILE_LIMIT = 16 * 1024 * 1024


def _read(root, rel, limit):
    """The text of a package database under ``root``; None when it does not exist.  One that cannot be read (not a
    regular file, larger than ``limit``, failing: ``_pci.read_node_file``) raises its NodeFileError (a HostError):
    what is installed and held decides the plan, so it is never taken for "nothing"."""
    data = read_node_file(os.path.join(root, rel), limit)
    return None if data is None else data.decode("utf-8", "replace")


def read_dpkg_installed(root="/"):
    text = _read(root, "var/lib/dpkg/status", DPKG_STATUS_LIMIT)
    return None if text is None else parse_dpkg_status(text)


def read_dpkg_held(root="/"):
    return parse_dpkg_held(_read(root, "var/lib/dpkg/status", DPKG_STATUS_LIMIT))


VERSIONLOCK_RE = re.compile(r"!?(?P<name>.+?)-(?:\d+:)?[^-]+-[^-]+")


def read_versionlock(root="/"):
    """Package names in dnf's versionlock list (RHEL 8/9/10 python3-dnf-plugin-versionlock)."""
    text = _read(root, "etc/dnf/plugins/versionlock.list", SMALL_FILE_LIMIT) or ""
    out = set()
    for line in text.splitlines():
        line = line.strip()
        m = VERSIONLOCK_RE.fullmatch(line) if line and not line.startswith("#") else None
        if m:
            out.add(m.group("name"))
    return out


def read_kernels(root="/"):
    """(installed kernel releases, those with a build tree) under ``root``'s /lib/modules."""
    base = os.path.join(root, "lib/modules")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return [], []
    installed = [n for n in names if KERNEL_RELEASE_RE.match(n) and os.path.isfile(os.path.join(base, n, "modules.order"))]
    with_build = [n for n in installed if os.path.isdir(os.path.join(base, n, "build"))]
    return installed, with_build


def _read_or_warn(path, limit, warnings):
    """The bytes of a node file; None when it does not exist or cannot be read (``_pci.read_node_file``: then the
    sentence saying why goes to ``warnings``, when given)."""
    try:
        return read_node_file(path, limit)
    except NodeFileError as exc:
        if warnings is not None:
            warnings.append(str(exc))
        return None


def read_mok(root, family, cert=None, warnings=None):
    """Where the DKMS signing key is and whether its certificate is in the firmware's MOK list.

    A certificate or MOK list that cannot be read (``_pci.read_node_file``) is passed over as if absent, with a
    sentence in ``warnings``: the plan then asks for the key to be enrolled, which the enrolment tools report as
    done already when it is."""
    key_path, der = None, None
    paths = [cert.lstrip("/")] if cert else MOK_KEY_PATHS.get(family, ())
    for rel in paths:
        der = _read_or_warn(os.path.join(root, rel), SMALL_FILE_LIMIT, warnings)
        if der is not None:
            key_path = "/" + rel
            break
    moklist = b""
    for rel in ("sys/firmware/efi/mok-variables/MokListRT", "sys/firmware/efi/efivars/MokListRT-" + MOK_GUID):
        moklist += _read_or_warn(os.path.join(root, rel), SMALL_FILE_LIMIT, warnings) or b""
    return {"key_path": key_path, "key_present": der is not None,
            "enrolled": bool(der) and der in moklist if moklist else (False if der else None)}


def device_holders(root="/", warnings=None):
    """Processes holding /dev/nvidia* open: [{pid, comm, devices}] (what blocks unloading the module).

    Only directories of /proc named by ASCII digits are processes.  A ``comm`` that cannot be read
    (``_pci.read_node_file``) is None, with a sentence in ``warnings``; one that vanished with its process is None."""
    proc = os.path.join(root, "proc")
    out = []
    try:
        pids = [p for p in os.listdir(proc) if re.fullmatch(r"[0-9]{1,10}", p)]
    except OSError:
        return out
    for pid in sorted(pids, key=int):
        fd_dir = os.path.join(proc, pid, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        devs = set()
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if target.startswith("/dev/nvidia"):
                devs.add(target)
        if devs:
            comm = read_node_text(os.path.join(proc, pid, "comm"), warnings, ATTR_LIMIT)
            out.append({"pid": int(pid), "comm": None if comm is None else comm.strip(), "devices": sorted(devs)})
    return out
