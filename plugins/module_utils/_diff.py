# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""The one diff shape of the collection's modules.

With ``--diff`` every module returns ``diff`` as a list (empty when nothing would change) of entries
``{before, after, before_header, after_header}``: one per thing it edits (a file, a GPU's layout, a boot
loader's arguments), text ending in a newline where there is text.  Ansible's callbacks print each entry;
a play that reads ``result.diff`` finds the same shape whichever module it ran.

Targets run this file: stdlib only.
"""
from __future__ import annotations

KEYS = ("before", "after", "before_header", "after_header")


def entry(header, before, after, before_header=None, after_header=None):
    """One entry; ``header`` names the thing (both headers unless given apart)."""
    return {"before": before or "", "after": after or "",
            "before_header": header if before_header is None else before_header,
            "after_header": header if after_header is None else after_header}


def entries(*parts):
    """The module result's ``diff``: entries and lists of entries (``None`` skipped) flattened into one list.
    An entry missing a key is a bug of the module: ValueError names it."""
    out = []
    for part in parts:
        if part is None:
            continue
        for item in ([part] if isinstance(part, dict) else part):
            missing = [k for k in KEYS if k not in item]
            if missing:
                raise ValueError("diff entry without %s: %r" % (", ".join(missing), item))
            out.append({k: item[k] for k in KEYS})
    return out


def exit_json(module, result, *parts):
    """End the module run with ``result``; in diff mode its ``diff`` is entries(*parts)."""
    if module._diff:
        result["diff"] = entries(*parts)
    module.exit_json(**result)
