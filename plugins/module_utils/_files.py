# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Safe file edits shared by the collection's modules.

PRIVATE: this module_utils file may change at any time; do not import it from
outside the collection.

Every config-editing module goes through :func:`ensure_file` (or, for byte-exact
multi-file edits, :func:`write_atomic` under :func:`file_lock`) so that:

- writes are atomic: a temp file on the target's file system (``<parent>/.gpuops-tmp/``, never inside a
  directory a daemon loads whole), fsync'd, renamed over the target; a reader sees the old or the new
  content, never a mix; temp files of killed runs are removed by the next write;
- a symlink is written *through*: the link's target is replaced, the link stays -- for a config the module
  edits (the user's own file: containerd's, CRI-O's, /etc/kernel/cmdline).  A file a module writes WHOLE
  (``owned``: its udev rules, modprobe.d and modules-load.d files, units, drop-ins, records, CDI specs) is
  never written through a link, and an existing file there that is not the module's own is refused
  (:func:`ownership_problem`), before anything changes;
- an existing file keeps its mode and owner unless a mode is asked for
  (``enforce_mode``); a new file gets exactly ``mode``, whatever the umask;
- backups go next to the file (named like ``module.backup_local`` names them) or, with ``backup_dir``,
  into a directory of their own (needed where the daemon loads every file of the
  config's directory, like ``crio.conf.d``);
- one exclusive lock per file (``fcntl.flock`` on ``<lock dir>/<sha256 of the
  real path>.lock``) is held around read-modify-write, so two runs at once on one
  host cannot lose each other's update.  Pass ``content`` as a callable
  (``before_text -> new_text``) to have ensure_file read and compute under the
  lock, or hold :func:`file_lock` around your own read;
- nothing is written (no lock file either) in check mode; a before/after diff
  is produced when the module runs with --diff.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import shutil
import stat
import tempfile
import time

from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import HostError
from ansible_collections.gpuops.nvidia.plugins.module_utils._pci import NodeFileError, file_kind, host_path, read_node_file

# where lock files live; the first usable one wins (GPUOPS_LOCK_DIR overrides)
LOCK_DIRS = ("/run/lock/gpuops", "/var/lock/gpuops")
LOCK_TIMEOUT = 600
_HELD = {}   # (pid, lock file) -> [fd, depth]: file_lock is re-entrant within a process


class FileLockTimeout(OSError, HostError):
    """Another process held a file's lock for longer than the timeout."""


class FileError(OSError, HostError):
    """A file the module must read or replace cannot be: a directory, FIFO or device where a regular
    file is expected, a file larger than the read bound, a parent that is not a directory, no permission, not
    UTF-8 text.  ``str()`` is a
    sentence naming the path; nothing has been changed when it is raised."""


class ForeignFileError(FileError):
    """A file a module writes whole is not its own to replace or remove: a symbolic link (to a file the
    module did not write), or a file without the module's marker (see :func:`ownership_problem`)."""


#: bytes read at most from a file a module edits or owns (configs, drop-ins, records, state files, caches): a
#: containerd or CRI-O config of a few MB is well within it; a larger file is refused (FileError), never loaded whole
READ_LIMIT = 16 * 1024 * 1024


def read_bytes_of(path, limit=READ_LIMIT):
    """The bytes of the regular file ``path``, or None when it does not exist.

    Read as every node file is (``_pci.read_node_file``): a FIFO, socket, device or directory is never opened, the
    read never blocks, and a file of more than ``limit`` bytes is not read.  Each of them raises FileError naming
    the path."""
    try:
        return read_node_file(path, limit)
    except NodeFileError as e:
        raise FileError(str(e)) from None


def read_text(path):
    """Return the file's text (UTF-8, newlines as Python's text mode reads them), or None when it
    does not exist.  Raises FileError (an OSError) for anything that is not a readable regular file
    of UTF-8 text of at most :data:`READ_LIMIT` bytes (see :func:`read_bytes_of`)."""
    data = read_bytes_of(path)
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FileError("%s is not UTF-8 text (byte 0x%02x at offset %d)" % (path, data[e.start], e.start))
    return text.replace("\r\n", "\n").replace("\r", "\n")


def on_host(root):
    """True when a module works on the real root (``root`` "/" or ""), not on a node-root tree under it: only
    then does it run tools that change the host or need root."""
    return root in ("/", "")


def require_root(module, name):
    """Fail before anything is read or changed when a module that edits the host does not run as root;
    returns ``module``."""
    if os.geteuid() != 0 and on_host(module.params["root"]):
        module.fail_json(msg="%s must run as root (become: true)" % name)
    return module


def check_paths(module, *options):
    """Fail before anything is read when the module's ``root`` or one of its path ``options`` (names of module
    parameters) is not an absolute path, or ``root`` is not a directory."""
    p = module.params
    problems = [x for x in (path_problem(p[o], o) for o in ("root",) + options) if x]
    if problems:
        module.fail_json(msg="; ".join(problems))
    if not os.path.isdir(p["root"]):
        module.fail_json(msg="root %s is not a directory" % p["root"])


def path_problem(value, option):
    """Why ``value`` is not an absolute path for ``option``, or None."""
    if value is None or value == "":
        return "%s must be an absolute path, got an empty value" % option
    if not isinstance(value, str):
        return "%s must be an absolute path, got %r" % (option, value)
    if any(ord(c) < 0x20 or ord(c) == 0x7f for c in value):
        return "%s must not hold a newline or another control character, got %r" % (option, value)
    if not os.path.isabs(value):
        return "%s must be an absolute path, got %r" % (option, value)
    return None


def ownership_problem(path, owned, content=None):
    """Why a module must not replace or remove ``path``, a file it writes whole, or None.

    ``owned`` says what the module's own file is:

    - None or False: not a whole file of the module (a config it edits): nothing to check here;
    - True: the module's own by its path alone (its content is checked by the module's parser, e.g. a JSON
      state file): it must not be a symbolic link;
    - a string, the marker every file of the module starts with (its ``# Managed by ...`` header): not a
      symbolic link, and an existing regular file must start with the marker -- or already hold exactly
      ``content`` (the text the module would write), which is as good as the module's own;
    - a callable ``text -> bool`` (its docstring names the kind of file): the same, the callable deciding.

    A symbolic link is refused whatever it points at: writing through it would replace a file the module did
    not write (``/etc/fstab`` behind a udev rule's name), and removing it would leave that file behind.
    Anything that is not a regular file is :func:`target_problem`'s to name.
    """
    if not owned:
        return None
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        return "cannot reach %s: %s" % (path, e.strerror or e)
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        return ("%s is a symbolic link (to %s): the module writes this file whole and never through a link "
                "(that would replace or leave behind a file it did not write); remove the link, then rerun"
                % (path, target))
    if owned is True or not stat.S_ISREG(st.st_mode):
        return None
    try:
        data = read_bytes_of(path)
    except FileError as e:
        return str(e)
    if data is None or (content is not None and data == content.encode("utf-8")):
        return None
    try:
        text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError:
        text = None
    if callable(owned):
        if text is not None and owned(text):
            return None
        kind = (owned.__doc__ or "").strip() or "a file of the kind the module writes"
        why = "it is not %s" % kind
    else:
        if text is not None and text.startswith(owned):
            return None
        why = "its first line is not %r" % owned.splitlines()[0]
    return ("%s exists and was not written by gpuops.nvidia (%s): it is neither replaced nor removed; move it "
            "away (keep what you need from it elsewhere), then rerun" % (path, why))


def target_problem(path, owned=None, content=None):
    """Why the regular file ``path`` cannot be read, created or replaced, or None.

    Checked before anything changes: ``path`` (when it exists) must be a regular file (symlinks are
    followed, unless ``owned``: see :func:`ownership_problem`, with ``content`` the text the module would
    write, None for a removal) and the nearest existing directory above it must be a directory.
    """
    problem = ownership_problem(path, owned, content)
    if problem:
        return problem
    try:
        st = os.stat(path)
    except FileNotFoundError:
        # absent (or a dangling symlink, written through): the directory it would be created in
        parent = os.path.dirname(os.path.realpath(path))
        while parent and not os.path.lexists(parent):
            parent = os.path.dirname(parent)
        if parent and not os.path.isdir(parent):
            return "cannot create %s: %s is not a directory" % (path, parent)
        return None
    except OSError as e:
        return "cannot reach %s: %s" % (path, e.strerror or e)
    if not stat.S_ISREG(st.st_mode):
        return "%s is %s, not a regular file" % (path, file_kind(st.st_mode))
    return None


# -- locks ------------------------------------------------------------------------

def _private_dir(d):
    """Create ``d`` (0700) if needed; refuse a symlink or a directory owned by someone else."""
    os.makedirs(d, mode=0o700, exist_ok=True)
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise OSError(errno.EPERM, "%s is not a directory owned by uid %d" % (d, os.geteuid()))
    return d


def lock_dir():
    """The directory holding lock files (created on first use)."""
    env = os.environ.get("GPUOPS_LOCK_DIR")
    if env:
        return _private_dir(env)
    uid = os.geteuid()
    candidates = [d if uid == 0 else "%s-%d" % (d, uid) for d in LOCK_DIRS]
    candidates.append(os.path.join(tempfile.gettempdir(), "gpuops-locks-%d" % uid))
    errors = []
    for d in candidates:
        try:
            return _private_dir(d)
        except OSError as e:
            errors.append("%s: %s" % (d, e))
    raise OSError(errno.EACCES, "no usable lock directory (%s)" % "; ".join(errors))


def lock_path(path, directory=None):
    """Lock file of ``path``: keyed by its real path (symlinks and ``..`` resolved)."""
    real = os.path.realpath(path)
    return os.path.join(directory or lock_dir(), hashlib.sha256(real.encode("utf-8")).hexdigest() + ".lock")


@contextlib.contextmanager
def file_lock(path, timeout=LOCK_TIMEOUT, directory=None):
    """Hold the exclusive lock of ``path`` (blocking up to ``timeout`` seconds)."""
    lp = lock_path(path, directory)
    key = (os.getpid(), lp)
    held = _HELD.get(key)
    if held is not None:
        held[1] += 1
        try:
            yield lp
        finally:
            held[1] -= 1
        return
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(lp, flags, 0o600)
    try:
        deadline = time.time() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
                if time.time() >= deadline:
                    raise FileLockTimeout(errno.ETIMEDOUT, "another run has held the lock of %s (%s) for more than "
                                          "%d s" % (path, lp, timeout))
                time.sleep(0.02)
        _HELD[key] = [fd, 1]
        try:
            yield lp
        finally:
            del _HELD[key]
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextlib.contextmanager
def file_locks(paths, enabled=True, timeout=LOCK_TIMEOUT):
    """Hold the locks of several files, taken in one global order (no deadlock between runs)."""
    if not enabled:
        yield []
        return
    with contextlib.ExitStack() as stack:
        seen = {}
        for p in paths:
            if p:
                seen.setdefault(lock_path(p), p)
        for lp in sorted(seen):
            stack.enter_context(file_lock(seen[lp], timeout=timeout))
        yield sorted(seen)


def run_locks(module, paths, what=None):
    """The locks of ``paths`` (see file_locks) for a module run that changes them, none in check mode: a context
    manager, taken already.  A lock that cannot be taken fails the module ("cannot lock WHAT: ...; nothing was
    changed"; ``what`` defaults to the paths)."""
    locks = contextlib.ExitStack()
    if not module.check_mode:
        try:
            locks.enter_context(file_locks(paths))
        except OSError as exc:
            module.fail_json(msg="cannot lock %s: %s; nothing was changed" % (", ".join(paths) if what is None else what, exc))
    return locks


# -- writing ----------------------------------------------------------------------

def _fsync_dir(directory):
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _selinux(module, real, existed):
    try:
        if module is not None and getattr(module, "selinux_enabled", None) and module.selinux_enabled():
            return module.selinux_context(real) if existed else module.selinux_default_context(real)
    except Exception:  # pragma: no cover - best effort, like atomic_move
        return None
    return None


def current_mode(path):
    """Permission bits of the file at ``path`` (through symlinks), None when absent."""
    try:
        return os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        return None


TMP_DIR_NAME = ".gpuops-tmp"


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _stale_temps(directory, prefix):
    """Temp files ``<prefix><pid>.*.tmp`` in ``directory`` whose writer (``pid``) is gone."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    out = []
    for n in names:
        if not (n.startswith(prefix) and n.endswith(".tmp")):
            continue
        pid = n[len(prefix):].split(".", 1)[0]
        if pid.isascii() and pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            out.append(os.path.join(directory, n))
    return out


def mark_pending(path, text):
    """Write a "work pending" marker durably (file and directory fsync'd) before the file it guards changes.

    Used where a regeneration (update-grub, kernel-install, initramfs) must be retried until it succeeds:
    the marker goes down first and is removed by clear_pending only after the regeneration worked.  Each run
    writes through a temp name of its own (runs at once never share one); temps of killed runs are removed.
    """
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    prefix = os.path.basename(path) + ".tmp."
    for t in _stale_temps(directory, prefix):
        try:
            os.unlink(t)
        except OSError:
            pass
    fd, tmp = tempfile.mkstemp(prefix="%s%d." % (prefix, os.getpid()), suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp) and not os.path.isdir(tmp):
            os.unlink(tmp)   # never leave a half-written marker next to the real one
        raise
    _fsync_dir(directory)


def clear_pending(path):
    """Remove a marker written by mark_pending (the pending work succeeded)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    _fsync_dir(os.path.dirname(path))


def clean_stale_temps(real):
    """Remove the temp files that earlier (killed) writes of the file ``real`` left behind."""
    directory = os.path.dirname(real) or "."
    base = os.path.basename(real)
    for d, prefix in ((os.path.join(os.path.dirname(directory), TMP_DIR_NAME), base + "."),
                      (directory, ".gpuops-")):
        for t in _stale_temps(d, prefix):
            try:
                os.unlink(t)
            except OSError:
                pass


def _temp_dir_for(directory):
    """Where the temp file of a write into ``directory`` goes: ``<parent>/.gpuops-tmp`` when that is on the same
    file system, so that no temp file ever sits in a directory a daemon loads every file of (CRI-O's
    ``crio.conf.d``, containerd's ``imports`` globs, ``grub.d``, ``rules.d``...).  None: use ``directory``."""
    parent = os.path.dirname(directory)
    if not parent or parent == directory:
        return None
    try:
        if os.stat(parent).st_dev != os.stat(directory).st_dev:
            return None
        tmpdir = os.path.join(parent, TMP_DIR_NAME)
        try:
            os.mkdir(tmpdir, 0o700)
        except FileExistsError:
            pass
        st = os.lstat(tmpdir)
        if not stat.S_ISDIR(st.st_mode) or st.st_dev != os.stat(directory).st_dev:
            return None
        return tmpdir
    except OSError:
        return None


def _drop_temp_dir(tmpdir):
    try:
        os.rmdir(tmpdir)       # only when empty: another run may be using it
    except OSError:
        pass


def write_atomic(module, path, data, mode=None, owner=None, default_mode=0o644, follow_links=True):
    """Atomically make the file at ``path`` hold the bytes ``data``.

    A symlink is followed: its target is replaced, the link is kept (``follow_links=False``: the link itself
    is replaced by the file; the directories above are still resolved).  ``mode``
    enforces the permission bits; None keeps the existing file's (``default_mode``
    for a new file).  ``owner`` (uid, gid) enforces the owner; None keeps the
    existing file's.  Returns the real path written.  On any error the target is
    unchanged and no temp file is left behind.

    The temp file is ``<parent of the target's directory>/.gpuops-tmp/<name>.<pid>.<random>.tmp`` (same file
    system, outside the directory a daemon may load whole), or ``.gpuops-<pid>.<random>.tmp`` in the target's
    own directory when the parent is on another file system or not writable.  Temp files a killed run left
    (their pid is gone) are removed by the next write of the same file.
    """
    if follow_links:
        real = os.path.realpath(path)
    else:
        real = os.path.join(os.path.realpath(os.path.dirname(path) or "."), os.path.basename(path))
    directory = os.path.dirname(real) or "."
    if not os.path.isdir(directory):
        os.makedirs(directory, mode=0o755)
    try:
        st = os.stat(real) if follow_links else os.lstat(real)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EINVAL, "%s is not a regular file" % real)
    final_mode = mode if mode is not None else (st.st_mode & 0o7777 if st is not None else default_mode)
    final_owner = owner if owner is not None else ((st.st_uid, st.st_gid) if st is not None else None)
    context = _selinux(module, real, st is not None)
    clean_stale_temps(real)
    tmpdir = _temp_dir_for(directory)
    try:
        try:
            _write_renamed(real, directory, tmpdir, data, final_mode, final_owner)
        except OSError as e:
            at_rename = getattr(e, "gpuops_at_rename", False)
            if tmpdir is None or (at_rename and e.errno != errno.EXDEV) or (
                    not at_rename and e.errno not in (errno.ENOENT, errno.ENOSPC, errno.EROFS, errno.EPERM,
                                                      errno.EACCES, errno.EDQUOT)):
                raise
            # the parent's temp directory could not be used (another mount point -- a bind mount --, full,
            # read-only): write the temp file in the target's own directory
            _write_renamed(real, directory, None, data, final_mode, final_owner)
    finally:
        if tmpdir is not None:
            _drop_temp_dir(tmpdir)
    _fsync_dir(directory)
    if context is not None:
        try:
            module.set_context_if_different(real, context, False)
        except Exception:  # pragma: no cover
            pass
    return real


def _write_renamed(real, directory, tmpdir, data, final_mode, final_owner):
    if tmpdir is not None:
        fd, tmp = tempfile.mkstemp(prefix="%s.%d." % (os.path.basename(real), os.getpid()), suffix=".tmp",
                                   dir=tmpdir)
    else:
        fd, tmp = tempfile.mkstemp(prefix=".gpuops-%d." % os.getpid(), suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if final_owner is not None and final_owner[0] is not None and \
                    (os.geteuid() == 0 or final_owner[0] == os.geteuid()):
                try:
                    os.fchown(f.fileno(), final_owner[0], final_owner[1] if final_owner[1] is not None else -1)
                except OSError as e:
                    if e.errno != errno.EPERM:
                        raise
            os.fchmod(f.fileno(), final_mode)    # after chown, which may clear set-id bits
            os.fsync(f.fileno())
        try:
            os.rename(tmp, real)
        except OSError as e:
            e.gpuops_at_rename = True
            raise
        tmp = None
    finally:
        if tmp is not None and os.path.lexists(tmp):
            os.unlink(tmp)


def backup_copy(module, path, backup_dir=None):
    """Copy the file at ``path`` before it changes; returns the backup's path.

    Without ``backup_dir`` the copy goes next to the file, named like ``module.backup_local`` names it
    (``<file>.<pid>.<time>~``).  With it, the copy goes to ``<backup_dir>/<real path of the file>.<pid>.<time>~``
    (mode kept, directories 0700), never into the file's own directory.  A copy that cannot be made (disk
    full, read-only or immutable directory) raises :class:`FileError` (an OSError) and leaves no partial
    backup behind.
    """
    real = os.path.realpath(path)
    stamp = time.strftime("%Y-%m-%d@%H:%M:%S~", time.localtime(time.time()))
    if not backup_dir:
        dest = "%s.%d.%s" % (path, os.getpid(), stamp)
    else:
        dest_dir = os.path.join(backup_dir, os.path.dirname(real).lstrip(os.sep))
        try:
            if not os.path.isdir(dest_dir):
                os.makedirs(dest_dir, mode=0o700)
        except OSError as e:
            raise FileError("cannot back up %s: cannot create %s: %s; nothing was changed"
                            % (path, dest_dir, e.strerror or e))
        dest = os.path.join(dest_dir, "%s.%d.%s" % (os.path.basename(real), os.getpid(), stamp))
    existed = os.path.lexists(dest)
    try:
        shutil.copy2(real, dest)
    except (OSError, shutil.Error) as e:
        if not existed and os.path.lexists(dest):
            try:
                os.unlink(dest)     # never leave a truncated backup that reads as a copy of the file
            except OSError:
                pass
        raise FileError("cannot back up %s to %s: %s; nothing was changed"
                        % (path, dest, getattr(e, "strerror", None) or e))
    try:
        st = os.stat(real)
        os.chown(dest, st.st_uid, st.st_gid)
    except OSError:
        pass
    return dest


def _nolock():
    return contextlib.nullcontext()


def ensure_file(module, path, content, mode=0o644, backup=False, diff_label=None, enforce_mode=False,
                backup_dir=None, lock=True, owned=None):
    """Make ``path`` hold exactly ``content``.

    ``content`` is the text, or a callable given the current text (None when the
    file is absent) that returns it, evaluated under the file's lock.  ``mode``
    is the mode of a new file; an existing file keeps its mode and owner unless
    ``enforce_mode`` (then ``mode`` is applied, also when the content is already
    right).  Returns a dict with ``changed``, ``diff`` (before/after, only when
    the module runs with --diff) and ``backup_file`` (when a backup was taken).
    Nothing is written in check mode.  The write is atomic and goes through
    symlinks -- unless ``owned`` (a file the module writes whole, see :func:`ownership_problem`): then a
    symlink, or a file that is not the module's own, raises :class:`ForeignFileError` (in check mode too)
    and nothing is written.
    """
    with (file_lock(path) if lock and not module.check_mode else _nolock()):
        if owned and os.path.islink(path):       # refused before anything is read through it
            raise ForeignFileError(ownership_problem(path, owned))
        try:
            before = read_text(path)
        except FileError:
            data = read_bytes_of(path) if owned is True else None
            if data is None:
                raise
            before = data.decode("utf-8", "replace")   # the module's own file, not text: replaced whole
        if callable(content):
            content = content(before)
        problem = ownership_problem(path, owned, content)
        if problem:
            raise ForeignFileError(problem)
        have_mode = current_mode(path) if before is not None else None
        mode_changes = bool(enforce_mode and before is not None and have_mode != mode)
        result = {"changed": before != content or mode_changes, "path": path}
        if module._diff:
            label = diff_label or path
            before_header = label if before is not None else "%s (absent)" % label
            after_header = label
            if mode_changes:
                before_header += " (mode %04o)" % have_mode
                after_header += " (mode %04o)" % mode
            result["diff"] = {
                "before": before or "",
                "after": content,
                "before_header": before_header,
                "after_header": after_header,
            }
        if not result["changed"] or module.check_mode:
            return result
        if before != content:
            if backup and before is not None:
                result["backup_file"] = backup_copy(module, path, backup_dir)
            write_atomic(module, path, content.encode("utf-8"),
                         mode=mode if (enforce_mode or before is None) else None, follow_links=not owned)
        else:
            os.chmod(os.path.realpath(path), mode)
        return result


def remove_file(module, path, backup=False, backup_dir=None, owned=None):
    """Remove ``path`` if present (check-mode aware), with optional backup.  With ``owned`` (a file the module
    writes whole, see :func:`ownership_problem`) a symlink or a file that is not the module's own raises
    :class:`ForeignFileError` (in check mode too) and stays."""
    with (file_lock(path) if not module.check_mode else _nolock()):
        problem = ownership_problem(path, owned)
        if problem:
            raise ForeignFileError(problem)
        before = read_text(path)
        result = {"changed": before is not None, "path": path}
        if module._diff:
            result["diff"] = {"before": before or "", "after": "", "before_header": path,
                              "after_header": "%s (absent)" % path}
        if result["changed"] and not module.check_mode:
            if backup:
                result["backup_file"] = backup_copy(module, path, backup_dir)
            os.unlink(path)
        return result


def write_planned_files(module, root, planned, files, diffs, actions, what, owned=None):
    """Write the persistence files a run planned, after it changed the runtime state (``actions``).

    ``planned``: {host path: content}, written in its order (under the node-root tree ``root``, see host_path), mode
    0644; content None removes the file.  ``owned``: what makes a file the module's own (see
    :func:`ownership_problem`), one for every file or {host path: owned}; check it with :func:`target_problem`
    before the runtime change, too.  ``files[path]`` becomes True when the file changed (or had already, in this
    run); each file's diff is appended to ``diffs``.  A file that cannot be written fails the module: ``what`` (the
    runtime state, e.g. "the drivers") is as reported in actions, but not persistent.  Returns ``files``."""
    for path, content in planned.items():
        target = host_path(root, path)
        own = owned.get(path) if isinstance(owned, dict) else owned
        try:
            r = (remove_file(module, target, owned=own) if content is None
                 else ensure_file(module, target, content, mode=0o644, owned=own))
        except OSError as exc:
            module.fail_json(msg="cannot write %s: %s; %s are as reported in actions, but their persistence "
                                 "across reboots is incomplete: fix the file and rerun" % (target, exc, what),
                             changed=bool(actions) or any(files.values()), actions=actions, files=files)
        files[path] = files.get(path, False) or r["changed"]
        if r.get("diff"):
            diffs.append(r["diff"])
    return files
