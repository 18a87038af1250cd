# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Kernel command-line arithmetic and boot-loader configuration rendering.

PRIVATE: may change at any time; not for use outside gpuops.nvidia.

Pure functions over strings; the module runs the boot-loader tools.
"""
from __future__ import annotations

import os
import re

GRUB_DROPIN = "/etc/default/grub.d/90-gpuops-kernel-cmdline.cfg"
SYSTEMD_BOOT_CMDLINE = "/etc/kernel/cmdline"
HEADER = "# Managed by gpuops.nvidia.kernel_cmdline -- do not edit.\n"
ARG_RE = re.compile(r'^[A-Za-z0-9_.\-]+(=("[^"\n]*"|[^\s"\']*))?$')
GRUB_LINE_RE = re.compile(r'^GRUB_CMDLINE_LINUX_DEFAULT="\$\{GRUB_CMDLINE_LINUX_DEFAULT\}(?: (?P<args>[^"]*))?"\s*$', re.M)


class CmdlineError(Exception):
    pass


def split_cmdline(text):
    """Tokens of a command line; double-quoted values keep their spaces."""
    out, cur, quoted = [], "", False
    for ch in (text or "").strip():
        if ch == '"':
            quoted = not quoted
            cur += ch
        elif ch.isspace() and not quoted:
            if cur:
                out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        out.append(cur)
    return out


def key_of(arg):
    return arg.split("=", 1)[0]


def validate_args(args):
    bad = [a for a in args if not isinstance(a, str) or not ARG_RE.match(a)]
    if bad:
        raise CmdlineError("malformed kernel argument(s) %s: expected key or key=value without spaces or single quotes"
                           % ", ".join(repr(b) for b in bad))
    keys = [key_of(a) for a in args]
    dup = sorted(set(k for k in keys if keys.count(k) > 1))
    if dup:
        raise CmdlineError("kernel argument key(s) given more than once: %s" % ", ".join(dup))


def apply_args(tokens, args, state):
    """New token list after making ``args`` present (replacing other values of the same key) or absent.

    ``absent`` with a bare ``key`` removes ``key`` and every ``key=value``; with ``key=value`` only that one.
    """
    out = list(tokens)
    for arg in args:
        key = key_of(arg)
        if state == "present":
            if arg in out:
                # drop duplicates of the key with other values
                out = [t for t in out if key_of(t) != key or t == arg]
                continue
            idx = next((i for i, t in enumerate(out) if key_of(t) == key), None)
            out = [t for t in out if key_of(t) != key]
            if idx is None:
                out.append(arg)
            else:
                out.insert(min(idx, len(out)), arg)
        else:
            if "=" in arg:
                out = [t for t in out if t != arg]
            else:
                out = [t for t in out if key_of(t) != key]
    return out


def effective(tokens):
    """``{key: last token}``: the kernel honours the last occurrence of a parameter."""
    out = {}
    for t in tokens:
        out[key_of(t)] = t
    return out


def unmet(running_tokens, args, state):
    """Arguments whose running state (``/proc/cmdline``) differs from the request (last value wins)."""
    eff = effective(running_tokens)
    res = []
    for arg in args:
        cur = eff.get(key_of(arg))
        if state == "present":
            if cur != arg:
                res.append(arg)
        elif "=" in arg:
            if cur == arg:
                res.append(arg)
        elif cur is not None:
            res.append(arg)
    return res


# --- Debian/Ubuntu GRUB drop-in ----------------------------------------------------

def parse_grub_dropin(text):
    """Arguments held by our drop-in (empty list when absent or foreign)."""
    if not text:
        return []
    m = GRUB_LINE_RE.search(text)
    return split_cmdline(m.group("args") or "") if m else []


def render_grub_dropin(args):
    if not args:
        return None
    return (HEADER + "# Sourced by grub-mkconfig after /etc/default/grub; run update-grub after changes.\n"
            'GRUB_CMDLINE_LINUX_DEFAULT="${GRUB_CMDLINE_LINUX_DEFAULT} %s"\n' % " ".join(args))


def overridden(base_tokens, args):
    """Requested arguments that override another value of the same key set in the base config."""
    eff = effective(base_tokens)
    return [a for a in args if key_of(a) in eff and eff[key_of(a)] != a]


def plan_grub(dropin_text, base_tokens, args, state):
    """Plan a GRUB drop-in change.

    ``base_tokens``: the configured command line *without* our drop-in (GRUB_CMDLINE_LINUX and
    GRUB_CMDLINE_LINUX_DEFAULT after sourcing /etc/default/grub and the other drop-ins).
    Returns ``(new_dropin_text_or_None, configured_tokens_after)``.  Raises CmdlineError when an
    argument to remove is set outside our drop-in (we never rewrite files we do not own).  A present argument whose key has another value in the
    base config is appended by the drop-in and so overrides it (see :func:`overridden`).
    """
    ours = parse_grub_dropin(dropin_text)
    if state == "absent":
        foreign = [a for a in args if apply_args(base_tokens, [a], "absent") != base_tokens]
        if foreign:
            raise CmdlineError("cannot remove %s: set outside %s (in /etc/default/grub or another drop-in); "
                               "remove it there" % (", ".join(foreign), GRUB_DROPIN))
        new_ours = apply_args(ours, args, "absent")
    else:
        # add what the base config does not already provide as its effective value; a different value of
        # the same key in the base config is overridden by ours, which grub-mkconfig appends later
        # (the kernel honours the last occurrence).
        eff = effective(base_tokens)
        new_ours = apply_args(ours, [a for a in args if eff.get(key_of(a)) != a], "present")
    return render_grub_dropin(new_ours), base_tokens + new_ours


# --- systemd-boot / kernel-install ---------------------------------------------------

def plan_cmdline_file(text, args, state):
    tokens = split_cmdline(text or "")
    new = apply_args(tokens, args, state)
    return (" ".join(new) + "\n") if new != tokens or text is None else text, new


# --- detection ---------------------------------------------------------------------

def detect_bootloader(root, which):
    """'grub' (Debian-style update-grub), 'grubby' (RHEL BLS) or 'systemd-boot'; None if unknown.

    ``which`` is a callable like ``module.get_bin_path``.
    """
    def exists(p):
        return os.path.exists(os.path.join(root, p.lstrip("/")))
    if exists("/etc/kernel/cmdline") and which("bootctl") and (exists("/boot/efi/loader") or exists("/efi/loader") or exists("/boot/loader/loader.conf")):
        if not which("grubby"):
            return "systemd-boot"
    if which("grubby") and exists("/boot/loader/entries"):
        return "grubby"
    if exists("/etc/default/grub") and (which("update-grub") or which("grub-mkconfig") or which("grub2-mkconfig")):
        return "grub"
    return None
