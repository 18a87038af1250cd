# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""What each file-editing module edits, under a fake root: the faults suite's scenarios.

A :class:`Scenario` builds its starting tree under a root directory (``build``), gives the module
arguments (``args``), the files it manages (``files``: the *old* content is what ``build`` leaves, the
*new* content what a clean run leaves), what the daemon (or boot loader) would load from a left-over
file (``daemon_visible``), how to tell that what is on disk is usable (``check``: containerd 1.6's own
``config dump`` for version-2 configs, a TOML/JSON/YAML/shell parse otherwise) and, where the module
restarts a daemon or regenerates a boot image, the log its stand-in tool keeps of what it saw
(``applied``), so that "the daemon runs what is on disk" can be checked after a rerun.
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import tomllib

import harness as h
import yaml

FIX = os.path.join(h.REPO, "tests", "unit", "fixtures")
CONTAINERD = shutil.which("containerd") or "/usr/bin/containerd"
HAVE_CONTAINERD = os.access(CONTAINERD, os.X_OK)


def fixture(*parts):
    with open(os.path.join(FIX, *parts), "rb") as f:
        return f.read()


def sha(data):
    return "missing" if data is None else hashlib.sha256(data).hexdigest()


# -- stand-in tools (one set per session) -------------------------------------------------------------

LOG_TOOL = r"""#!/bin/sh
# usage: TOOL LOG FAILFLAG FILE...  -- fails while FAILFLAG exists (once if FAILFLAG.once exists),
# else logs the sha256 of each FILE (what the restarted daemon / regenerated boot image would hold)
log="$1"; flag="$2"; shift 2
if [ -e "$flag" ]; then echo "stand-in tool refused: $flag exists" >&2; exit 1; fi
if [ -e "$flag.once" ]; then rm -f "$flag.once"; echo "stand-in tool refused once: $flag.once existed" >&2; exit 1; fi
line=""
for f in "$@"; do
  if [ -e "$f" ]; then h=$(sha256sum < "$f"); h=${h%% *}; else h=missing; fi
  line="$line $h"
done
echo "${line# }" >> "$log"
"""

CTR = """#!/bin/sh
echo "TYPE                            ID                       PLATFORMS      STATUS"
echo "io.containerd.grpc.v1           cri                      -              ok"
echo "io.containerd.cri.v1            runtime                  linux/amd64    ok"
"""

CONTAINERD_BAD = """#!/bin/sh
echo 'containerd: failed to load TOML: (stand-in) unsupported key "nvidia"' >&2
exit 1
"""

DOCKERD_OK = """#!/bin/sh
echo "configuration OK"
"""

DOCKERD_BAD = """#!/bin/sh
echo 'unable to configure the Docker daemon with file x: the following directives are specified both as a flag and in the configuration file' >&2
exit 1
"""

SOCKET_SERVER = r"""
import os, socket, sys
path = sys.argv[1]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)
s.listen(128)
sys.stdout.write("ready\n"); sys.stdout.flush()
while True:
    c, _ = s.accept()
    c.close()
"""


class Tools(object):
    """Scripts and a listening socket that stand in for daemons and boot-loader tools."""
    dir = None
    proc = None

    @classmethod
    def start(cls):
        if cls.dir:
            return cls
        cls.dir = tempfile.mkdtemp(prefix="gpuops-faults-tools-")
        for name, text in (("logtool", LOG_TOOL), ("ctr", CTR), ("containerd-bad", CONTAINERD_BAD),
                           ("dockerd-ok", DOCKERD_OK), ("dockerd-bad", DOCKERD_BAD)):
            p = os.path.join(cls.dir, name)
            with open(p, "w") as f:
                f.write(text)
            os.chmod(p, 0o755)
        cls.socket = os.path.join(cls.dir, "daemon.sock")
        cls.proc = subprocess.Popen([sys.executable, "-c", SOCKET_SERVER, cls.socket], stdout=subprocess.PIPE)
        cls.proc.stdout.readline()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(cls.socket)
        s.close()
        return cls

    @classmethod
    def stop(cls):
        if cls.proc:
            cls.proc.kill()
            cls.proc.wait()
            cls.proc = None
        if cls.dir:
            shutil.rmtree(cls.dir, ignore_errors=True)
            cls.dir = None

    @classmethod
    def path(cls, name):
        return os.path.join(cls.start().dir, name)


_DUMP_CACHE = {}


def containerd_dump(main_path):
    """Whether containerd 1.6 accepts the config at ``main_path`` (with its imports): (ok, message).

    Cached by the bytes of the main file and of every file it imports."""
    data = h.read_bytes(main_path)
    if data is None:
        return False, "%s is missing" % main_path
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        return False, "%s is not TOML: %s" % (main_path, e)
    key = [data]
    for imp in doc.get("imports", []):
        if any(c in imp for c in "*?["):
            d = os.path.dirname(imp)
            found = sorted(os.path.join(d, n) for n in (os.listdir(d) if os.path.isdir(d) else [])
                           if go_glob_match(imp, os.path.join(d, n)))
        else:
            found = [imp]
        for p in found:
            key.append(p.encode() + b"\0" + (h.read_bytes(p) or b"<missing>"))
    key = hashlib.sha256(b"\0\0".join(key)).hexdigest()
    if key not in _DUMP_CACHE:
        proc = subprocess.run([CONTAINERD, "--config", main_path, "config", "dump"], capture_output=True, text=True,
                              env=dict(os.environ, LC_ALL="C"))
        _DUMP_CACHE[key] = (proc.returncode == 0, (proc.stderr or proc.stdout).strip()[-400:])
    return _DUMP_CACHE[key]


def go_glob_match(pattern, path):
    """filepath.Match as containerd uses it for imports: ``*`` also matches a leading dot, never ``/``."""
    if pattern.count("/") != path.count("/"):
        return False
    return all(fnmatch.fnmatchcase(a, b) for a, b in zip(path.split("/"), pattern.split("/")))


class Scenario(object):
    name = ""
    module = ""         # collection module
    label = ""          # what the summary counts it under
    setup_kind = None
    uninstall = False   # container_runtime: state=absent must give back the pristine bytes
    has_apply = False   # a restart / regeneration whose stand-in logs what it saw

    def __init__(self, root):
        self.root = root

    @classmethod
    def fresh(cls, root):
        """A scenario of this class with its starting tree built in ``root`` (emptied first)."""
        if os.path.lexists(root):
            shutil.rmtree(root)
        os.makedirs(root)
        sc = cls(root)
        sc.build()
        return sc

    def p(self, rel):
        return os.path.join(self.root, rel)

    # -- to override
    def build(self):
        raise NotImplementedError

    def args(self):
        raise NotImplementedError

    def files(self):
        raise NotImplementedError

    def daemon_visible(self, path):
        return path in self.files()

    def check(self):
        """None when what is on disk is usable by the daemon, else why not."""
        return None

    def pair_ok(self, states):
        """Whether the combination of per-file states ('old'/'new'/'other') is one a daemon may see."""
        return True

    # -- common
    def env(self):
        return {"GPUOPS_LOCK_DIR": self.p("run/lock/gpuops")}

    def setup(self):
        return None

    def absent_args(self):
        return dict(self.args(), state="absent")

    def apply_log(self):
        return self.p("apply.log")

    def fail_flag(self):
        return self.p("apply.fail")

    def applied(self):
        """Lines the stand-in restart/regeneration tool logged (sha256 of the files it saw)."""
        data = h.read_bytes(self.apply_log())
        return data.decode().split("\n")[:-1] if data else []

    def apply_files(self):
        return self.files()

    def snapshot(self):
        return {f: h.read_bytes(f) for f in self.files()}

    def digest(self, snap):
        return " ".join(sha(snap[f]) for f in self.apply_files())

    def strays(self):
        """Temp files left anywhere under the root (lock files and the stand-ins' own files excluded)."""
        out = []
        for base, _dirs, names in os.walk(self.root):
            if base.startswith(self.p("run/lock")):
                continue
            for n in names:
                if n.startswith(".gpuops-") or n.endswith(".tmp"):
                    out.append(os.path.join(base, n))
        return sorted(out)

    def runtime_ok(self):
        """Runtime state after convergence (vfio: the drivers); None when right."""
        return None


# -- container_runtime ---------------------------------------------------------------------------------

class _Runtime(Scenario):
    module = "container_runtime"
    uninstall = True
    has_apply = True
    runtime = "containerd"

    def state_dir(self):
        return self.p("var/lib/gpuops/container_runtime")

    def base_args(self):
        return {"runtime": self.runtime, "state_dir": self.state_dir(), "restart_mode": "command",
                "restart_command": [Tools.path("logtool"), self.apply_log(), self.fail_flag()] + self.apply_files(),
                "socket": Tools.socket, "ctr_path": Tools.path("ctr"), "restart_timeout": 5,
                "runtime_path": "/usr/bin/nvidia-container-runtime"}


class ContainerdV2Main(_Runtime):
    name = "containerd-v2-main"
    label = "container_runtime: containerd v2 main"

    def cfg(self):
        return self.p("etc/containerd/config.toml")

    def build(self):
        h.write_file(self.cfg(), fixture("runtime", "containerd", "v2-custom.toml"))

    def args(self):
        a = self.base_args()
        a.update(config_path=self.cfg(), binary_path=CONTAINERD, validate=HAVE_CONTAINERD, set_as_default=True,
                 enable_cdi=True, backup=True)
        return a

    def files(self):
        return [self.cfg()]

    def absent_args(self):
        # uninstall after every kill point: validated in containerd-v2-uninstall, not here (time)
        return dict(self.args(), state="absent", validate=False)

    def check(self):
        if HAVE_CONTAINERD:
            ok, msg = containerd_dump(self.cfg())
            return None if ok else msg
        return _toml_check(self.files())


class ContainerdV2DropIn(ContainerdV2Main):
    """Drop-in + a main file that imports conf.d/*.toml (a glob: a left-over *.toml there is loaded)."""
    name = "containerd-v2-dropin"
    label = "container_runtime: containerd v2 drop-in"
    glob_import = True
    fixture_name = "v2-default-1.6.toml"

    def dropin(self):
        return self.p("etc/containerd/conf.d/99-nvidia.toml")

    def build(self):
        text = fixture("runtime", "containerd", self.fixture_name).decode()
        if self.glob_import:
            text = text.replace("imports = []", 'imports = ["%s"]' % self.p("etc/containerd/conf.d/*.toml"))
        h.write_file(self.cfg(), text)
        os.makedirs(os.path.dirname(self.dropin()), exist_ok=True)

    def args(self):
        a = ContainerdV2Main.args(self)
        a.update(drop_in_path=self.dropin())
        return a

    def files(self):
        return [self.cfg(), self.dropin()]

    def daemon_visible(self, path):
        if path in self.files():
            return True
        imports = []
        for f in (self.cfg(),):
            try:
                imports += tomllib.loads((h.read_bytes(f) or b"").decode()).get("imports", [])
            except ValueError:
                pass
        if self.glob_import:
            imports.append(self.p("etc/containerd/conf.d/*.toml"))
        return any(go_glob_match(i, path) for i in imports)

    def pair_ok(self, states):
        main, drop = states
        # the main file never imports a drop-in that is missing or stale
        return not (main == "new" and drop not in ("new", "same"))


class ContainerdV2DropInSibling(ContainerdV2DropIn):
    """Drop-in in a directory of its own (explicitly imported), so that each of the two can be faulted alone."""
    name = "containerd-v2-dropin-sibling"
    label = "container_runtime: containerd v2 drop-in"
    glob_import = False
    fixture_name = "v2-custom.toml"

    def dropin(self):
        return self.p("etc/containerd-dropins/99-nvidia.toml")


class ContainerdV2Uninstall(ContainerdV2DropIn):
    """state=absent of a drop-in set-up (explicit import): the pristine main file back, the drop-in gone."""
    name = "containerd-v2-uninstall"
    label = "container_runtime: containerd v2 uninstall"
    glob_import = False
    fixture_name = "v2-custom.toml"
    uninstall = False

    def build(self):
        ContainerdV2DropIn.build(self)
        self.pristine = h.read_bytes(self.cfg())
        out = h.run("container_runtime", dict(ContainerdV2DropIn.args(self), restart_mode="none"),
                    self.p("build.w"), env=self.env())
        assert out.result and out.changed and not out.failed, out
        shutil.rmtree(self.p("build.w"))

    def args(self):
        return dict(ContainerdV2DropIn.args(self), state="absent")

    def pair_ok(self, states):
        main, drop = states
        # old main imports the drop-in: it must still be there (old); new main imports nothing
        return not (main == "old" and drop not in ("old", "same"))


class ContainerdV3Main(_Runtime):
    name = "containerd-v3-main"
    label = "container_runtime: containerd v3 main"

    def cfg(self):
        return self.p("etc/containerd/config.toml")

    def build(self):
        h.write_file(self.cfg(), fixture("runtime", "containerd", "v3-custom.toml"))

    def args(self):
        a = self.base_args()
        a.update(config_path=self.cfg(), validate=False, set_as_default=True, enable_cdi=True, backup=True)
        return a

    def files(self):
        return [self.cfg()]

    def check(self):
        return _toml_check(self.files())


class ContainerdV3DropIn(ContainerdV3Main):
    name = "containerd-v3-dropin"
    label = "container_runtime: containerd v3 drop-in"

    def dropin(self):
        return self.p("etc/containerd/conf.d/99-nvidia.toml")

    def args(self):
        return dict(ContainerdV3Main.args(self), drop_in_path=self.dropin())

    def files(self):
        return [self.cfg(), self.dropin()]

    def pair_ok(self, states):
        main, drop = states
        return not (main == "new" and drop not in ("new", "same"))

    def check(self):
        why = _toml_check([f for f in self.files() if os.path.exists(f)])
        if why:
            return why
        doc = tomllib.loads(h.read_bytes(self.cfg()).decode())
        missing = [i for i in doc.get("imports", []) if not os.path.exists(i)]
        return "imports a missing file: %s" % missing if missing else None


class Crio(_Runtime):
    """CRI-O drop-in: CRI-O loads *every* file under crio.conf.d (filepath.Walk, no name filter)."""
    name = "crio-dropin"
    label = "container_runtime: CRI-O drop-in"
    runtime = "crio"

    def confd(self):
        return self.p("etc/crio/crio.conf.d")

    def cfg(self):
        return os.path.join(self.confd(), "99-nvidia.toml")

    def build(self):
        h.write_file(os.path.join(self.confd(), "10-site.conf"), '[crio.runtime]\nlog_level = "info"\n')
        h.write_file(self.cfg(), '# site settings kept by the module\n[crio.runtime]\nconmon_cgroup = "pod"\n')

    def args(self):
        a = self.base_args()
        a.update(config_path=self.cfg(), set_as_default=True, backup=True)
        return a

    def files(self):
        return [self.cfg()]

    def daemon_visible(self, path):
        return path.startswith(self.confd() + "/")

    def check(self):
        return _toml_check(sorted(os.path.join(b, n) for b, _d, ns in os.walk(self.confd()) for n in ns))


class Docker(_Runtime):
    name = "docker-daemon-json"
    label = "container_runtime: docker daemon.json"
    runtime = "docker"

    def cfg(self):
        return self.p("etc/docker/daemon.json")

    def build(self):
        h.write_file(self.cfg(), fixture("runtime", "docker", "daemon.json"))

    def args(self):
        a = self.base_args()
        a.update(config_path=self.cfg(), binary_path=Tools.path("dockerd-ok"), set_as_default=True, enable_cdi=True,
                 backup=True)
        return a

    def files(self):
        return [self.cfg()]

    def check(self):
        try:
            json.loads(h.read_bytes(self.cfg()))
        except (TypeError, ValueError) as e:
            return "daemon.json: %s" % e
        return None


# -- cdi_spec ------------------------------------------------------------------------------------------

VER = "580.159.04"
UUID = "GPU-0b231366-65a0-0fb7-6602-4823e36b7ca8"


class Cdi(Scenario):
    name = "cdi-spec"
    module = "cdi_spec"
    label = "cdi_spec"

    def host(self):
        return self.p("host")

    def cfg(self):
        return self.p("host/etc/cdi/nvidia.yaml")     # cdi_spec writes path under root (0.3.0)

    def build(self):
        r = self.host()
        h.write_file(r + "/proc/driver/nvidia/version",
                     "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build\n" % VER)
        h.write_file(r + "/proc/driver/nvidia/gpus/0000:00:06.0/information",
                     "Model: \t\t NVIDIA H200\nDevice Minor: \t 0\nGPU UUID: \t %s\nBus Location: \t 0000:00:06.0\n" % UUID)
        for d in ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"):
            h.write_file(r + d, "")
        h.write_file(r + "/usr/lib/x86_64-linux-gnu/libcuda.so." + VER, "ELF")
        h.write_file(r + "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so." + VER, "ELF")
        h.write_file(r + "/usr/bin/nvidia-smi", "ELF", mode=0o755)
        h.write_file(self.cfg(), "---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: all\n"
                                 "  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n", mode=0o640)

    def args(self):
        return {"path": "/etc/cdi/nvidia.yaml", "root": self.host(), "source": "proc", "mode": "0644", "backup": True,
                "library_dirs": ["/usr/lib/x86_64-linux-gnu"], "bin_dirs": ["/usr/bin"]}

    def files(self):
        return [self.cfg()]

    def daemon_visible(self, path):
        # the CDI registry loads *.json and *.yaml of its spec directories
        return path in self.files() or (os.path.dirname(path) == os.path.dirname(self.cfg())
                                         and path.endswith((".yaml", ".json")))

    def check(self):
        try:
            spec = yaml.safe_load(h.read_bytes(self.cfg()))
            assert isinstance(spec, dict) and spec.get("kind") and spec.get("devices"), spec
        except Exception as e:  # noqa: BLE001 - any parse failure is the finding
            return "spec: %r" % e
        return None


# -- kernel_cmdline ----------------------------------------------------------------------------------------

class Grub(Scenario):
    name = "kernel-cmdline-grub"
    module = "kernel_cmdline"
    label = "kernel_cmdline: GRUB drop-in"
    setup_kind = "kernel_cmdline"
    has_apply = True
    bootloader = "grub"

    def cfg(self):
        return self.p("etc/default/grub.d/90-gpuops-kernel-cmdline.cfg")

    def marker(self):
        return self.p("var/lib/gpuops/kernel_cmdline.regenerate-pending")

    def setup(self):
        return ("kernel_cmdline", {"root": self.root, "update_grub": self.tool_path("update-grub"),
                                   "kernel_install": self.tool_path("kernel-install")})

    def tool_path(self, name):
        return self.p("tools/" + name)

    def build(self):
        h.write_file(self.p("etc/default/grub"), 'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="quiet splash"\n'
                                                 'GRUB_CMDLINE_LINUX=""\n')
        for tool in ("update-grub", "kernel-install"):
            h.write_file(self.tool_path(tool), '#!/bin/sh\nexec %s %s %s %s\n'
                         % (Tools.path("logtool"), self.apply_log(), self.fail_flag(), " ".join(self.apply_files())),
                         mode=0o755)
        self.build_file()
        # an earlier run put intel_iommu=on there (and regenerated)
        out = h.run("kernel_cmdline", {"args": ["intel_iommu=on"], "bootloader": self.bootloader},
                    self.p("build.w"), env=self.env(), setup=self.setup())
        assert out.result and not out.failed, out
        shutil.rmtree(self.p("build.w"))
        os.unlink(self.apply_log())

    def build_file(self):
        os.makedirs(os.path.dirname(self.cfg()), exist_ok=True)

    def args(self):
        return {"args": ["intel_iommu=on", "iommu=pt", 'dyndbg="file vfio_pci.c +p"'], "bootloader": self.bootloader,
                "backup": True}

    def files(self):
        return [self.cfg()]

    def daemon_visible(self, path):
        return fnmatch.fnmatchcase(path, self.p("etc/default/grub.d/*.cfg"))

    def check(self):
        proc = subprocess.run(["/bin/sh", "-c", '. "$1" && . "$2"; printf %s "$GRUB_CMDLINE_LINUX_DEFAULT"', "sh",
                               self.p("etc/default/grub"), self.cfg()], capture_output=True, text=True)
        if proc.returncode != 0 or not proc.stdout.startswith("quiet splash"):
            return "sourcing the drop-in: rc=%d %r %r" % (proc.returncode, proc.stdout, proc.stderr)
        return None


class SystemdBoot(Grub):
    name = "kernel-cmdline-systemd-boot"
    label = "kernel_cmdline: /etc/kernel/cmdline"
    bootloader = "systemd-boot"

    def cfg(self):
        return self.p("etc/kernel/cmdline")

    def build_file(self):
        h.write_file(self.cfg(), "root=UUID=0b4c-11 ro quiet\n")

    def daemon_visible(self, path):
        return path == self.cfg()

    def check(self):
        data = h.read_bytes(self.cfg())
        return None if data and data.startswith(b"root=UUID=0b4c-11 ro") and data.endswith(b"\n") else "cmdline %r" % data


# -- vfio_pci ----------------------------------------------------------------------------------------------

VFIO_FILES = ("etc/gpuops/vfio-pci.json", "etc/udev/rules.d/40-gpuops-vfio-pci.rules",
              "etc/modules-load.d/gpuops-vfio-pci.conf", "etc/modprobe.d/gpuops-vfio-pci.conf")


class Vfio(Scenario):
    """Bind a GPU + its audio function (one IOMMU group) on a host where another GPU was bound earlier."""
    name = "vfio-pci-second-gpu"
    module = "vfio_pci"
    label = "vfio_pci: state + persistence files"
    setup_kind = "vfio"
    has_apply = True
    earlier = ["0000:42:00.0"]
    devices = ["0000:43:00.0"]
    group = ["0000:43:00.0", "0000:43:00.1"]

    def setup(self):
        return ("vfio", {"root": self.root, "update_initramfs": self.p("tools/update-initramfs")})

    def build(self):
        sys.path.insert(0, os.path.join(FIX, "vfio"))
        from sysfs import NVIDIA, make_tree
        make_tree(self.root, NVIDIA)
        os.makedirs(self.p("sys/bus/pci/drivers/vfio-pci"), exist_ok=True)
        h.write_file(self.p("tools/update-initramfs"), '#!/bin/sh\nexec %s %s %s %s\n'
                     % (Tools.path("logtool"), self.apply_log(), self.fail_flag(), " ".join(self.apply_files())),
                     mode=0o755)
        if self.earlier:
            out = h.run("vfio_pci", {"devices": self.earlier, "root": self.root}, self.p("build.w"), env=self.env(),
                        setup=self.setup())
            assert out.result and out.changed and not out.failed, out
            shutil.rmtree(self.p("build.w"))
            os.unlink(self.apply_log())
        self.original = {b: self.driver(b) for b in self.group}

    def args(self):
        return {"devices": self.devices, "root": self.root}

    def files(self):
        return [self.p(f) for f in VFIO_FILES]

    def apply_files(self):
        return [self.p(VFIO_FILES[3])]

    def driver(self, bdf):
        try:
            return os.path.basename(os.readlink(self.p("sys/bus/pci/devices/%s/driver" % bdf)))
        except OSError:
            return None

    def daemon_visible(self, path):
        return any(fnmatch.fnmatchcase(path, self.p(g)) for g in (
            "etc/udev/rules.d/*.rules", "etc/modprobe.d/*.conf", "etc/modules-load.d/*.conf"))

    def check(self):
        data = h.read_bytes(self.p(VFIO_FILES[0]))
        if data is not None:
            try:
                json.loads(data)
            except ValueError as e:
                return "state file: %s" % e
        return None

    def runtime_ok(self):
        bad = {b: self.driver(b) for b in self.group + self.earlier if self.driver(b) != "vfio-pci"}
        return "not on vfio-pci: %s" % bad if bad else None


class VfioFirst(Vfio):
    """The first GPU of a host: every persistence file is created, the initramfs ordering changes."""
    name = "vfio-pci-first-gpu"
    earlier = []
    devices = ["0000:41:00.0"]
    group = ["0000:41:00.0"]


def _toml_check(paths):
    for p in paths:
        try:
            tomllib.loads(h.read_bytes(p).decode("utf-8"))
        except (ValueError, AttributeError, UnicodeDecodeError) as e:
            return "%s: %s" % (p, e)
    return None


KILL_SCENARIOS = [ContainerdV2Main, ContainerdV2DropIn, ContainerdV2Uninstall, ContainerdV3Main, ContainerdV3DropIn,
                  Crio, Docker, Cdi, Grub, SystemdBoot, Vfio, VfioFirst]
BY_NAME = {s.name: s for s in KILL_SCENARIOS + [ContainerdV2DropInSibling]}
