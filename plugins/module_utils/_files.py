# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Safe file edits shared by the collection's modules.

PRIVATE: this module_utils file may change at any time; do not import it from
outside the collection.

Every config-editing module goes through :func:`ensure_file` so that writes are
atomic (temp file in the same directory + ``atomic_move``), optionally backed up,
skipped when the content is unchanged, honour check mode, and produce a diff.
"""
from __future__ import annotations

import os
import tempfile


def read_text(path):
    """Return the file's text, or None when it does not exist."""
    try:
        with open(path, "r", encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return None


def ensure_file(module, path, content, mode=0o644, backup=False, diff_label=None):
    """Make ``path`` hold exactly ``content``.

    Returns a dict with ``changed``, ``diff`` (before/after, only when the module
    runs with --diff) and ``backup_file`` (when a backup was taken).  Nothing is
    written in check mode.  The write is atomic; the old file is kept as a
    timestamped backup when ``backup`` is true.
    """
    before = read_text(path)
    result = {"changed": before != content, "path": path}
    if module._diff:
        label = diff_label or path
        result["diff"] = {
            "before": before or "",
            "after": content,
            "before_header": label if before is not None else "%s (absent)" % label,
            "after_header": label,
        }
    if not result["changed"] or module.check_mode:
        return result
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        os.makedirs(directory, mode=0o755)
    if backup and before is not None:
        result["backup_file"] = module.backup_local(path)
    fd, tmp = tempfile.mkstemp(prefix=".gpuops-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(content)
        os.chmod(tmp, mode)
        module.atomic_move(tmp, path, unsafe_writes=False)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return result


def remove_file(module, path, backup=False):
    """Remove ``path`` if present (check-mode aware), with optional backup."""
    before = read_text(path)
    result = {"changed": before is not None, "path": path}
    if module._diff:
        result["diff"] = {"before": before or "", "after": "", "before_header": path, "after_header": "%s (absent)" % path}
    if result["changed"] and not module.check_mode:
        if backup:
            result["backup_file"] = module.backup_local(path)
        os.unlink(path)
    return result
