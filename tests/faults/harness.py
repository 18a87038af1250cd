# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""Run one module of the *installed* collection in a child process, with faults.

A child is forked from the test process (the collection and Ansible are imported once, before the
fork, so a run costs milliseconds instead of an interpreter start) and runs the module's ``main()``
exactly as a target does: module arguments patched in, stdout captured, ``sys.exit`` turned into the
exit code.  An uncaught exception is reported as a ``traceback`` (a module must fail with a ``msg``).

Kill points
-----------
While the module runs, every *mutating* operation is a numbered kill point:

* Python audit events (``sys.addaudithook``): ``open`` for writing (``os.open`` with O_WRONLY/O_RDWR/
  O_CREAT/O_TRUNC/O_APPEND, ``open(..., "w"/"a"/"x"/"+")``), ``os.rename``, ``os.replace``,
  ``os.remove`` (unlink), ``os.rmdir``, ``os.mkdir``, ``os.chmod``/``fchmod``, ``os.chown``/``fchown``,
  ``os.truncate``, ``os.symlink``, ``os.link``, ``os.utime``, ``shutil.copyfile``/``copymode``/
  ``copystat``, ``tempfile.mkstemp`` (after the temp file exists), ``fcntl.flock``,
  ``subprocess.Popen`` (a validator, a restart, a boot-loader tool), ``os.kill``;
* wrapped calls the audit hook does not see: ``os.fsync``, ``os.fdatasync``, ``os.write`` and
  ``write()`` on every file object opened for writing.  A kill at a write is a *torn write*: half of
  the data is written (and flushed to the kernel), then the process dies.

``kill_at=N`` sends SIGKILL to the child right before kill point N (for a write: after half of it),
so N = 1..len(trace) visits every state between two operations of the write path.  ``trace=True``
records the points of a run without killing it.

Set-ups (``setup=``) let a module run against a fake root, installed in the child after the fork:
``kernel_cmdline`` (the GRUB drop-in, /etc/kernel/cmdline and the regeneration marker moved under the
root, update-grub/kernel-install replaced by logging scripts) and ``vfio`` (a stand-in for the PCI
core over the synthetic sysfs tree of tests/unit/fixtures/vfio, update-initramfs by a logging script).
"""
from __future__ import annotations

import builtins
import errno
import io
import json
import os
import signal
import sys
import time
import traceback

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
COLLECTIONS = os.environ.get("GPUOPS_COLLECTIONS", os.path.join(REPO, ".collections"))
MODULES = "ansible_collections.gpuops.nvidia.plugins.modules."
UTILS = "ansible_collections.gpuops.nvidia.plugins.module_utils."

MUTATING_EVENTS = frozenset((
    "os.rename", "os.replace", "os.remove", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.truncate",
    "os.symlink", "os.link", "os.utime", "shutil.copyfile", "shutil.copymode", "shutil.copystat",
    "shutil.move", "shutil.rmtree", "tempfile.mkstemp", "fcntl.flock", "fcntl.lockf", "subprocess.Popen",
    "os.kill", "os.posix_spawn", "os.exec",
))
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _is_write_open(mode, flags):
    if isinstance(mode, str):
        return any(c in mode for c in "wax+")
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


class Faults(object):
    """Kill-point counter of one child (see the module docstring)."""

    def __init__(self, kill_at=None, trace=False, where_file=None, barrier=None):
        self.kill_at = kill_at
        self.trace = trace
        self.where_file = where_file
        # (directory, n, event, substring): wait at the first such kill point until n runs got there
        self.barrier = barrier and (tuple(barrier) + ("fcntl.flock", ""))[:4]
        self.active = False
        self.busy = False
        self.n = 0
        self.log = []

    def point(self, name, detail="", torn=None):
        """One kill point; ``torn`` is called (to write half the data) before a kill at this point."""
        if not self.active or self.busy:
            return
        self.busy = True
        try:
            self.n += 1
            if self.trace:
                self.log.append("%s %s" % (name, detail))
            if self.barrier and name == self.barrier[2] and self.barrier[3] in detail:
                self._barrier()
            if self.kill_at is not None and self.n == self.kill_at:
                if self.where_file:
                    fd = os.open(self.where_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                    os.write(fd, ("%d %s %s" % (self.n, name, detail)).encode("utf-8", "replace"))
                    os.close(fd)
                if torn is not None:
                    torn()
                os.kill(os.getpid(), signal.SIGKILL)
        finally:
            self.busy = False

    def _barrier(self):
        d, n = self.barrier[:2]
        self.barrier = None             # only the first lock of the run
        open(os.path.join(d, str(os.getpid())), "w").close()
        deadline = time.time() + 20
        while len(os.listdir(d)) < n and time.time() < deadline:
            time.sleep(0.005)

    def audit(self, event, args):
        if not self.active or self.busy:
            return
        if event == "open":
            path, mode, flags = args
            if not _is_write_open(mode, flags):
                return
            self.point("open", str(path))
        elif event in MUTATING_EVENTS:
            detail = args[0] if args else ""
            if event == "subprocess.Popen":
                detail = os.path.basename(str(args[0])) + " " + " ".join(str(a) for a in (args[1] or [])[1:3])
            self.point(event, str(detail))


class _WriteProxy(object):
    """A file object opened for writing whose ``write`` is a kill point (torn write)."""

    def __init__(self, f, faults, name):
        object.__setattr__(self, "_f", f)
        object.__setattr__(self, "_faults", faults)
        object.__setattr__(self, "_name", name)

    def write(self, data):
        f = self._f

        def torn():
            half = data[:len(data) // 2]
            if half:
                f.write(half)
            f.flush()
        self._faults.point("write", "%s (%d bytes)" % (self._name, len(data)), torn=torn)
        return f.write(data)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __enter__(self):
        self._f.__enter__()
        return self

    def __exit__(self, *exc):
        return self._f.__exit__(*exc)

    def __iter__(self):
        return iter(self._f)

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __setattr__(self, name, value):
        setattr(self._f, name, value)


def install_faults(faults):
    sys.addaudithook(faults.audit)
    real_open = io.open

    def open_(file, mode="r", *a, **kw):
        f = real_open(file, mode, *a, **kw)
        if faults.active and not faults.busy and isinstance(mode, str) and any(c in mode for c in "wax+"):
            return _WriteProxy(f, faults, str(file))
        return f
    builtins.open = open_
    io.open = open_

    def wrap(name, torn_write=False):
        real = getattr(os, name)

        def wrapper(*a, **kw):
            torn = None
            if torn_write:
                def torn():
                    half = bytes(a[1])[:len(a[1]) // 2]
                    if half:
                        real(a[0], half)
            faults.point("os." + name, "", torn=torn)
            return real(*a, **kw)
        setattr(os, name, wrapper)
    for name in ("fsync", "fdatasync"):
        wrap(name)
    wrap("write", torn_write=True)


# -- module set-ups in the child (fake roots) ---------------------------------------------------------

def _require(mod, *names):
    missing = [n for n in names if not hasattr(mod, n)]
    if missing:
        raise RuntimeError("%s has no %s: the faults harness must be updated before it can run this module "
                           "against a fake root" % (mod.__name__, ", ".join(missing)))


def _setup_kernel_cmdline(opts):
    from ansible.module_utils.basic import AnsibleModule

    km = sys.modules[MODULES + "kernel_cmdline"]
    lk = sys.modules[UTILS + "_kernel_cmdline"]
    root = opts["root"]
    # never let a renamed constant send a run to the host's /etc or /var: refuse instead
    _require(km, "GRUB_DROPIN", "SYSTEMD_BOOT_CMDLINE", "REGEN_PENDING", "GRUB_BASE_SCRIPT", "_kernel_image")
    _require(lk, "GRUB_DROPIN")
    km.GRUB_DROPIN = root + "/etc/default/grub.d/90-gpuops-kernel-cmdline.cfg"
    km.SYSTEMD_BOOT_CMDLINE = root + "/etc/kernel/cmdline"
    km.REGEN_PENDING = root + "/var/lib/gpuops/kernel_cmdline.regenerate-pending"
    km.GRUB_BASE_SCRIPT = km.GRUB_BASE_SCRIPT.replace("/etc/default", root + "/etc/default")
    km._kernel_image = lambda kver: root + "/boot/vmlinuz"
    tools = {"update-grub": opts["update_grub"], "kernel-install": opts["kernel_install"]}
    AnsibleModule.get_bin_path = lambda self, name, required=False, opt_dirs=None: tools.get(name)
    lk.GRUB_DROPIN = km.GRUB_DROPIN


class _Kernel(object):
    """The PCI core's reaction to sysfs writes under ``root`` (bind, unbind, drivers_probe)."""

    def __init__(self, root, v):
        self.root = root
        self.real = v._write

    def _dev(self, bdf, *parts):
        return os.path.join(self.root, "sys/bus/pci/devices", bdf, *parts)

    def _driver(self, bdf):
        try:
            return os.path.basename(os.readlink(self._dev(bdf, "driver")))
        except OSError:
            return None

    def _link(self, bdf, drv):
        if os.path.islink(self._dev(bdf, "driver")):
            os.unlink(self._dev(bdf, "driver"))
        if drv:
            os.symlink(os.path.join(self.root, "sys/bus/pci/drivers", drv), self._dev(bdf, "driver"))

    def write(self, path, value):
        bdf = value.strip()
        self.real(path, value)
        if path.endswith("/unbind"):
            self._link(bdf, None)
        elif path.endswith("/bind"):
            self._link(bdf, os.path.basename(os.path.dirname(path)))
        elif path.endswith("drivers_probe") and self._driver(bdf) is None:
            with open(self._dev(bdf, "driver_override")) as f:
                ov = f.read().strip()
            if ov not in ("", "(null)") and os.path.isdir(os.path.join(self.root, "sys/bus/pci/drivers", ov)):
                self._link(bdf, ov)


def _setup_vfio(opts):
    from ansible.module_utils.basic import AnsibleModule

    v = sys.modules[UTILS + "_vfio"]
    vm = sys.modules[MODULES + "vfio_pci"]
    _require(v, "_write", "WAIT_TIMEOUT")
    _require(vm, "on_host")
    kernel = _Kernel(opts["root"], v)
    v._write = kernel.write
    v.WAIT_TIMEOUT = 0.2
    vm.on_host = lambda root: True            # regenerate the initramfs (a logging stand-in) for the fake root
    tools = {"update-initramfs": opts["update_initramfs"]}
    real = AnsibleModule.get_bin_path
    AnsibleModule.get_bin_path = lambda self, name, required=False, opt_dirs=None: (
        tools[name] if name in tools else (None if name == "dracut" else real(self, name, required, opt_dirs)))


SETUPS = {"kernel_cmdline": _setup_kernel_cmdline, "vfio": _setup_vfio}


# -- running ------------------------------------------------------------------------------------------

class Outcome(object):
    def __init__(self, status, result, tb, trace, where, stderr):
        self.status = status            # exit code, or "killed"
        self.result = result            # the module's JSON result (None when killed)
        self.traceback = tb
        self.trace = trace              # kill points seen (trace=True)
        self.where = where              # the kill point the child died at
        self.stderr = stderr

    @property
    def killed(self):
        return self.status == "killed"

    @property
    def failed(self):
        return self.result is None or bool(self.result.get("failed"))

    @property
    def changed(self):
        return bool(self.result and self.result.get("changed"))

    def __repr__(self):
        return "Outcome(status=%r, where=%r, traceback=%r, result=%r, stderr=%r)" % (
            self.status, self.where, (self.traceback or "")[-1500:], self.result, (self.stderr or "")[-500:])


def import_modules():
    """Import Ansible and every module once, in the parent (children fork with them loaded)."""
    if COLLECTIONS not in sys.path:
        sys.path.insert(0, COLLECTIONS)
    import ansible.module_utils.basic  # noqa: F401
    from ansible.module_utils.testing import patch_module_args  # noqa: F401
    for name in ("container_runtime", "cdi_spec", "kernel_cmdline", "vfio_pci"):
        __import__(MODULES + name)
    mod = sys.modules[MODULES + "container_runtime"]
    if not os.path.realpath(mod.__file__).startswith(os.path.realpath(COLLECTIONS)):
        raise RuntimeError("%s imported from %s, not from the installed collection %s" % (mod.__name__, mod.__file__, COLLECTIONS))


def _child(module, args, workdir, env, setup, kill_at, trace, barrier):
    out_path = os.path.join(workdir, "stdout")
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.close(fd)
    fd = os.open(os.path.join(workdir, "stderr"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 2)
    os.close(fd)
    fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(fd, 0)
    os.close(fd)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", write_through=True)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.environ.update(env or {})
    try:
        from ansible.module_utils import _internal
        _internal.is_controller = False
    except (ImportError, AttributeError):
        pass
    from ansible.module_utils.testing import patch_module_args

    if setup:
        SETUPS[setup[0]](setup[1])
    faults = Faults(kill_at=kill_at, trace=trace, where_file=os.path.join(workdir, "where"),
                    barrier=barrier)
    if kill_at is not None or trace or barrier:
        install_faults(faults)
    main = sys.modules[MODULES + module].main
    code = 0
    with patch_module_args(args):
        faults.active = True
        try:
            main()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            faults.active = False
            with open(os.path.join(workdir, "traceback"), "w") as f:
                f.write(traceback.format_exc())
            code = 70
        faults.active = False
    if faults.barrier:                  # never got to a lock: do not keep the others waiting
        open(os.path.join(faults.barrier[0], str(os.getpid())), "w").close()
    if trace:
        with open(os.path.join(workdir, "trace"), "w") as f:
            f.write("\n".join(faults.log))
    sys.stdout.flush()
    return code


def run(module, args, workdir, env=None, setup=None, kill_at=None, trace=False, barrier=None, timeout=120,
        wait=True):
    """Fork a child running ``module`` with ``args``; returns an :class:`Outcome` (or the pid, wait=False)."""
    os.makedirs(workdir, exist_ok=True)
    for f in ("stdout", "stderr", "traceback", "trace", "where"):
        if os.path.exists(os.path.join(workdir, f)):
            os.unlink(os.path.join(workdir, f))
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 71
        try:
            code = _child(module, args, workdir, env, setup, kill_at, trace, barrier)
        except BaseException:
            try:
                with open(os.path.join(workdir, "traceback"), "w") as f:
                    f.write(traceback.format_exc())
            except BaseException:
                pass
        finally:
            os._exit(code)
    if not wait:
        return pid
    return collect(pid, workdir, timeout)


def collect(pid, workdir, timeout=120):
    deadline = time.time() + timeout
    while True:
        got, status = os.waitpid(pid, os.WNOHANG)
        if got:
            break
        if time.time() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError("module run in %s did not finish in %d s" % (workdir, timeout))
        time.sleep(0.002)
    if os.WIFSIGNALED(status):
        code = "killed" if os.WTERMSIG(status) == signal.SIGKILL else "signal %d" % os.WTERMSIG(status)
    else:
        code = os.WEXITSTATUS(status)

    def read(name):
        try:
            with open(os.path.join(workdir, name), encoding="utf-8", errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return None
    result = None
    out = read("stdout") or ""
    start = out.find("{")
    if start >= 0 and code != "killed":
        try:
            result = json.loads(out[start:])
        except ValueError:
            result = None
    trace = read("trace")
    return Outcome(code, result, read("traceback"), trace.split("\n") if trace else [], read("where"), read("stderr"))


# -- file-system helpers --------------------------------------------------------------------------------

def read_bytes(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def write_file(path, data, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8"))
    os.chmod(path, mode)


def fill(directory, name=".filler"):
    """Fill the file system of ``directory`` until a write fails with ENOSPC; returns the filler's path."""
    path = os.path.join(directory, name)
    chunk = b"\0" * 4096
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while True:
            try:
                os.write(fd, chunk)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    break
                chunk = chunk[:len(chunk) // 2]
    finally:
        os.close(fd)
    return path
