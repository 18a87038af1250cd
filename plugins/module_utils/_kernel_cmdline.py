# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Kernel command-line arithmetic and boot-loader configuration rendering.

PRIVATE: may change at any time; not for use outside gpuops.nvidia.

Pure functions over strings; the module runs the boot-loader tools.
"""
from __future__ import annotations

import json
import os
import re

from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import InputError

GRUB_DROPIN = "/etc/default/grub.d/90-gpuops-kernel-cmdline.cfg"
SYSTEMD_BOOT_CMDLINE = "/etc/kernel/cmdline"
#: present while a boot-loader regeneration (update-grub, grub-mkconfig, kernel-install) is due: written
#: before the drop-in or /etc/kernel/cmdline changes, removed only after the tool succeeded
REGEN_PENDING = "/var/lib/gpuops/kernel_cmdline.regenerate-pending"
HEADER = "# Managed by gpuops.nvidia.kernel_cmdline -- do not edit.\n"

# Kernel parameter syntax (Documentation/admin-guide/kernel-parameters.rst, lib/cmdline.c next_arg()):
# ``key`` or ``key=value``; double quotes protect spaces in a value.  The kernel has no escapes, so the
# argument must also survive two interpreters on its way: the shell that sources the GRUB drop-in and
# GRUB's own script parser, which reads grub.cfg (it expands ``$``, takes ``\`` as an escape, splits on
# ``;``, globs ``*?[]``, and hands ``'`` to the kernel as ``\'``).  So: a key of letters, digits, ``_``,
# ``-`` and ``.``; an unquoted value of the characters below; a double-quoted value of any printable
# ASCII but ``"``, ``$``, backtick, ``\`` and ``'``.
KEY_CHARS = "A-Za-z0-9_.\\-"
UNQUOTED_CHARS = "A-Za-z0-9_.,:/=+@!%~^#\\-"
QUOTED_CHARS = "\\x20\\x21\\x23\\x25\\x26\\x28-\\x5b\\x5d-\\x5f\\x61-\\x7e"
ARG_RE = re.compile(r'(?P<key>[%s]+)(?:=(?P<value>[%s]*|"[%s]*"))?' % (KEY_CHARS, UNQUOTED_CHARS, QUOTED_CHARS))
ARG_RULE = ('expected key or key=value (key: letters, digits, "_", "-", "."; a value holds letters, digits and '
            '_.,:/=+@!%~^#- only, or is double-quoted as a whole, key="a b", and may then also hold spaces and '
            ';&|<>()[]{}*?; never $, backticks, \\, single quotes, control characters or non-ASCII)')
# ours: GRUB_CMDLINE_LINUX_DEFAULT="${GRUB_CMDLINE_LINUX_DEFAULT}"' a b'   (the addition single-quoted)
GRUB_LINE_RE = re.compile(r"""GRUB_CMDLINE_LINUX_DEFAULT="\$\{GRUB_CMDLINE_LINUX_DEFAULT\}"(?P<quoted>(?:'[^']*'|\\')+)[ \t]*""")
# written by versions before the quoting fix (read so that such a drop-in is recognised and rewritten)
GRUB_OLD_LINE_RE = re.compile(r'GRUB_CMDLINE_LINUX_DEFAULT="\$\{GRUB_CMDLINE_LINUX_DEFAULT\}(?: (?P<args>[^"]*))?"\s*')


class CmdlineError(InputError):
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


#: one token of a command line as split_cmdline splits it (double quotes keep spaces; an unclosed one runs to the end)
TOKEN_RE = re.compile(r'(?:[^\s"]|"[^"]*"?)+')


def kernel_part(text):
    """``(kernel tokens, init's arguments)`` of a command line: the tokens before its first bare ``--`` (the kernel's
    parameters: the kernel stops there and hands the rest to init), and the text after it, verbatim but for the
    surrounding whitespace (None when there is no ``--``)."""
    text = text or ""
    for m in TOKEN_RE.finditer(text):
        if m.group() == "--":
            return split_cmdline(text[:m.start()]), text[m.end():].strip()
    return split_cmdline(text), None


def kernel_args(tokens):
    """The tokens before the first bare ``--`` (the kernel's parameters)."""
    tokens = list(tokens)
    return tokens[:tokens.index("--")] if "--" in tokens else tokens


def join_cmdline(tokens, init=None):
    """A command line from kernel tokens and, when not None, init's arguments after ``--`` (one line, newline)."""
    parts = list(tokens)
    if init is not None:
        parts += ["--"] + ([init] if init else [])
    return " ".join(parts) + "\n"


def canonical(token):
    """The parameter as the kernel's next_arg() sees it: ``key`` or ``key=value`` without the double quotes
    around the whole parameter (``"key=a b"``, GRUB's form) or around the value (``key="a b"``)."""
    t = token
    if t.startswith('"'):
        t = t[1:]
        if t.endswith('"'):
            t = t[:-1]
    key, eq, value = t.partition("=")
    if value.startswith('"'):
        value = value[1:]
        if value.endswith('"'):
            value = value[:-1]
    return key + eq + value


def key_of(arg):
    return canonical(arg).split("=", 1)[0]


def why_malformed(arg):
    """None for a valid argument, else the first reason it is not one."""
    if not isinstance(arg, str):
        return "not a string"
    if arg == "":
        return "empty"
    if any(ord(c) < 0x20 or ord(c) == 0x7f for c in arg):
        return "holds a newline or another control character"
    if any(ord(c) > 0x7e for c in arg):
        return "holds a non-ASCII character"
    if arg == "--":
        return "'--' ends the kernel's parameters (what follows goes to init)"
    for c, why in (("$", "the shell and GRUB expand $"), ("`", "the shell runs backticks"),
                   ("\\", "the shell and GRUB take \\ as an escape"),
                   ("'", "GRUB hands ' to the kernel as \\'")):
        if c in arg:
            return why
    if ARG_RE.fullmatch(arg):
        return None
    key, eq, value = arg.partition("=")
    if not re.fullmatch("[%s]+" % KEY_CHARS, key):
        return "the key %r is not letters, digits, '_', '-' and '.'" % key
    if '"' in value:
        return "a double quote may only enclose the whole value (key=\"a b\")"
    return "a value with spaces or any of ;&|<>()[]{}*? must be double-quoted (key=\"...\")"


def validate_args(args):
    bad = [(a, why_malformed(a)) for a in args]
    bad = [(a, why) for a, why in bad if why]
    if bad:
        raise CmdlineError("malformed kernel argument(s) %s; %s"
                           % (", ".join("%r (%s)" % (a, why) for a, why in bad), ARG_RULE))
    keys = [key_of(a) for a in args]
    dup = sorted(set(k for k in keys if keys.count(k) > 1))
    if dup:
        raise CmdlineError("kernel argument key(s) given more than once: %s" % ", ".join(dup))


def sh_single_quote(text):
    """``text`` as one shell word that the shell takes literally, whatever it holds."""
    return "'" + text.replace("'", "'\\''") + "'"


def apply_args(tokens, args, state):
    """New token list after making ``args`` present (replacing other values of the same key) or absent.

    ``absent`` with a bare ``key`` removes ``key`` and every ``key=value``; with ``key=value`` only that one.
    """
    out = list(tokens)
    for arg in args:
        key = key_of(arg)
        if state == "present":
            if any(canonical(t) == canonical(arg) for t in out):
                # drop duplicates of the key with other values
                out = [t for t in out if key_of(t) != key or canonical(t) == canonical(arg)]
                continue
            idx = next((i for i, t in enumerate(out) if key_of(t) == key), None)
            out = [t for t in out if key_of(t) != key]
            if idx is None:
                out.append(arg)
            else:
                out.insert(min(idx, len(out)), arg)
        else:
            if "=" in arg:
                out = [t for t in out if canonical(t) != canonical(arg)]
            else:
                out = [t for t in out if key_of(t) != key]
    return out


def effective(tokens):
    """``{key: last token}`` (canonical form): the kernel honours the last occurrence of a parameter."""
    out = {}
    for t in tokens:
        out[key_of(t)] = canonical(t)
    return out


def unmet(running_tokens, args, state):
    """Arguments whose running state (``/proc/cmdline``) differs from the request (last value wins)."""
    eff = effective(running_tokens)
    res = []
    for arg in args:
        cur = eff.get(key_of(arg))
        if state == "present":
            if cur != canonical(arg):
                res.append(arg)
        elif "=" in arg:
            if cur == canonical(arg):
                res.append(arg)
        elif cur is not None:
            res.append(arg)
    return res


# --- Debian/Ubuntu GRUB drop-in ----------------------------------------------------

def _sh_unquote(quoted):
    """Inverse of :func:`sh_single_quote` for a run of '...' and \\' pieces."""
    return "".join(p[1:-1] if p.startswith("'") else "'" for p in re.findall(r"'[^']*'|\\'", quoted))


def parse_grub_dropin(text):
    """Arguments held by our drop-in (empty list when absent or foreign).

    Raises CmdlineError when the drop-in holds an argument that is not valid kernel parameter syntax
    (it was edited by hand): nothing is built on it.
    """
    if not text:
        return []
    lines = text.splitlines()
    m = next((x for x in map(GRUB_LINE_RE.fullmatch, lines) if x), None)
    if m:
        args = split_cmdline(_sh_unquote(m.group("quoted")))
    else:
        m = next((x for x in map(GRUB_OLD_LINE_RE.fullmatch, lines) if x), None)
        args = split_cmdline(m.group("args") or "") if m else []
    bad = [a for a in args if why_malformed(a)]
    if bad:
        raise CmdlineError("%s holds malformed kernel argument(s) %s (edited by hand?); fix or remove that file, "
                           "then rerun" % (GRUB_DROPIN, ", ".join(repr(a) for a in bad)))
    return args


def render_grub_dropin(args):
    """The drop-in, or None when it must not exist.

    The addition is one single-quoted shell word appended to the value /etc/default/grub set, so the shell
    that sources the file (grub-mkconfig) takes it literally: nothing in it is expanded or run, whatever
    it holds.  (Arguments are validated before they get here; the quoting does not depend on it.)
    """
    if not args:
        return None
    return (HEADER + "# Sourced by grub-mkconfig after /etc/default/grub; run update-grub after changes.\n"
            'GRUB_CMDLINE_LINUX_DEFAULT="${GRUB_CMDLINE_LINUX_DEFAULT}"%s\n' % sh_single_quote(" " + " ".join(args)))


def overridden(base_tokens, args):
    """Requested arguments that override another value of the same key set in the base config."""
    eff = effective(base_tokens)
    return [a for a in args if key_of(a) in eff and eff[key_of(a)] != canonical(a)]


def plan_grub(dropin_text, base_tokens, args, state, strict=True):
    """Plan a GRUB drop-in change.

    ``base_tokens``: the configured command line *without* our drop-in (GRUB_CMDLINE_LINUX and
    GRUB_CMDLINE_LINUX_DEFAULT after sourcing /etc/default/grub and the other drop-ins).
    Returns ``(new_dropin_text_or_None, configured_tokens_after)``.  Raises CmdlineError when an
    argument to remove is set outside our drop-in (we never rewrite files we do not own).  A present argument whose key has another value in the
    base config is appended by the drop-in and so overrides it (see :func:`overridden`).
    With ``strict=False`` (removals for an owner) an argument also set outside the drop-in is removed from the
    drop-in only, and the base config's copy stays.
    """
    ours = parse_grub_dropin(dropin_text)
    if state == "absent":
        foreign = [a for a in args if apply_args(base_tokens, [a], "absent") != base_tokens]
        if foreign and strict:
            raise CmdlineError("cannot remove %s: set outside %s (in /etc/default/grub or another drop-in); "
                               "remove it there" % (", ".join(foreign), GRUB_DROPIN))
        new_ours = apply_args(ours, args, "absent")
    else:
        # add what the base config does not already provide as its effective value; a different value of
        # the same key in the base config is overridden by ours, which grub-mkconfig appends later
        # (the kernel honours the last occurrence).
        eff = effective(base_tokens)
        new_ours = apply_args(ours, [a for a in args if eff.get(key_of(a)) != canonical(a)], "present")
    return render_grub_dropin(new_ours), base_tokens + new_ours


# --- systemd-boot / kernel-install ---------------------------------------------------

def plan_cmdline_file(text, args, state):
    """``(new text, kernel tokens after)`` of /etc/kernel/cmdline: ``args`` applied to the kernel's parameters only;
    init's arguments after ``--`` are kept as they are (they go to init at the next boot, as before)."""
    tokens, init = kernel_part(text)
    new = apply_args(tokens, args, state)
    return join_cmdline(new, init) if new != tokens or text is None else text, new


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


# --- ownership records (option owner) ----------------------------------------------
#: default directory of the records: <dir>/<owner>.json lists the arguments that owner added
RECORD_DIR = "/var/lib/gpuops/kernel_cmdline"
OWNER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def record_path(record_dir, owner):
    return os.path.join(record_dir, owner + ".json")


def parse_record(text, path):
    """The entries of an owner's record: ``[{"arg": "intel_iommu=on", "replaced": "intel_iommu=off" or None}]``.

    ``replaced`` is the value of the same key that the configured command line held before the owner's
    argument replaced it (restored on removal where the boot loader backend had replaced it).
    Raises CmdlineError for a record that is not one this module wrote (nothing is built on it).
    """
    if not text:
        return []
    try:
        data = json.loads(text)
        entries = data["added"]
        out = []
        for e in entries:
            arg, replaced = e["arg"], e.get("replaced")
            if why_malformed(arg) or (replaced is not None and why_malformed(replaced)):
                raise ValueError("malformed argument in entry %r" % (e,))
            out.append({"arg": arg, "replaced": replaced})
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CmdlineError("%s is not a kernel_cmdline ownership record (%s); fix or remove it, then rerun"
                           % (path, exc))
    return out


def render_record(owner, entries):
    """The record's text, or None when the owner holds no argument (the file must not exist)."""
    if not entries:
        return None
    return json.dumps({"owner": owner, "added": entries}, indent=2, sort_keys=True) + "\n"


def _matches(token, arg):
    """``token`` is what ``arg`` names for removal: a bare key names every value, key=value only that one."""
    if "=" in arg:
        return canonical(token) == canonical(arg)
    return key_of(token) == key_of(arg)


def plan_owned(before, args, state, entries, others):
    """Plan a change made on behalf of an owner.

    ``before``: the configured command line (the next boot's) before this run; ``entries``: the owner's
    record; ``others``: canonical forms of the arguments other owners' records hold.

    present: an argument the configured command line does not already hold (as its effective value) is added
    and recorded, with the value of its key it replaces; one that is already configured is recorded only when
    another owner added it (shared), never when it was there on its own (the user's: left alone on absent).
    absent: only recorded arguments named by ``args`` (every recorded one when ``args`` is empty) are removed,
    and not those another owner still holds; a value they replaced comes back when its key would otherwise be
    unset.

    Returns dict(ops=[(args, state), ...] for the backend, entries=the record after, kept=requested arguments
    left alone because the owner did not add them, removed=arguments taken off the command line).
    """
    eff = effective(before)
    ours = set(canonical(e["arg"]) for e in entries)
    new, kept = [dict(e) for e in entries], []
    if state == "present":
        for a in args:
            c, key = canonical(a), key_of(a)
            if eff.get(key) != c:
                old = next((e for e in new if key_of(e["arg"]) == key), None)
                replaced = old["replaced"] if old else next((t for t in reversed(before) if key_of(t) == key), None)
                new = [e for e in new if key_of(e["arg"]) != key] + [{"arg": a, "replaced": replaced}]
            elif c in ours:
                continue
            elif c in others:
                new.append({"arg": a, "replaced": None})
            else:
                kept.append(a)
        return dict(ops=[(list(args), "present")], entries=new, kept=kept, removed=[])
    sel = [e for e in entries if not args or any(_matches(e["arg"], a) for a in args)]
    kept = [a for a in args if not any(_matches(e["arg"], a) for e in entries)]
    remove = [e["arg"] for e in sel if canonical(e["arg"]) not in others]
    after = effective(apply_args(before, remove, "absent"))
    restore = []
    for e in sel:
        r = e["replaced"]
        if r and e["arg"] in remove and key_of(r) not in after and key_of(r) not in [key_of(x) for x in restore]:
            restore.append(r)
    ops = [(remove, "absent")] + ([(restore, "present")] if restore else [])
    return dict(ops=ops, entries=[e for e in new if e not in sel], kept=kept, removed=remove)


def reboot_pending_absent(running, configured, candidates):
    """Arguments the running kernel honours although the next boot's configuration no longer does."""
    run_eff, conf_eff = effective(running), effective(configured)
    return [a for a in candidates
            if run_eff.get(key_of(a)) != conf_eff.get(key_of(a)) and unmet(running, [a], "absent")]
