# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""The readiness report's data and text (roles/report; controller side only).

* ``markdown_cell``: any value -> text for one cell of a Markdown table (or a heading): one line, and
  nothing in it that Markdown or the HTML it passes through would read as markup.  Host names, GPU
  names, labels and problem texts come from inventories and nodes.
* ``join_parts``: the report parts that earlier AWX job slices published (``gpuops_report_part_*``,
  handed on as extra variables) -> one list of rows, as plain data.  Ansible trusts extra variables
  from a file as templates; a copy of plain ``str``/``int``/... is data again, so a ``{{ }}`` that a node
  put into a GPU name stays text.

PRIVATE: may change at any time; not for use outside gpuops.nvidia.
"""
from __future__ import annotations

import re
from collections.abc import Mapping

from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import InputError

PART_PREFIX = "gpuops_report_part_"

# line breaks (CommonMark's \n and \r, and what other renderers take for one), tabs and every other control
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
# ASCII punctuation with a meaning in inline Markdown (GitHub's dialect: tables, strikethrough) or in a
# heading; '\\' first so that a value's own backslash cannot escape the one added after it
_SPECIAL = re.compile(r"[\\`*_\[\]|~#]")
# what a code span cannot hold as it is: its own delimiter, a table's cell delimiter, a backslash that
# the table would read as escaping one; and no markup at all, for renderers that look into code spans
_CODE_UNSAFE = re.compile(r"[`|\\<>]")


class ReportInputError(InputError):
    """A report part that is not a list of rows."""


def markdown_cell(value, code=False):
    """``value`` as the text of a Markdown table cell: control characters (line breaks too) become a
    space, ``& < >`` HTML entities (Markdown passes inline HTML through), and the characters Markdown
    gives a meaning escaped with a backslash.  With ``code``, a value that a code span holds as it is
    (no backtick, pipe, backslash, ``<`` or ``>``) is returned as a code span; any other value as escaped text."""
    text = "" if value is None else "%s" % (value,)
    text = _CONTROL.sub(" ", text)
    if code and text.strip() and not _CODE_UNSAFE.search(text):
        return "`%s`" % text
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _SPECIAL.sub(lambda m: "\\" + m.group(0), text)


def as_data(value, where):
    """A copy of ``value`` in plain Python types (str, int, float, bool, None, list, dict with str keys).
    Whatever the source marked on the original (Ansible's trust as a template) is not copied."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): as_data(v, "%s.%s" % (where, k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_data(v, "%s[%d]" % (where, i)) for i, v in enumerate(value)]
    raise ReportInputError("%s: a %s is not report data" % (where, type(value).__name__))


def join_parts(parts):
    """{variable name: rows} -> the rows of every part, as plain data, one per host (a host in several
    parts keeps the row of the last part in name order), sorted by host."""
    by_host = {}
    for name in sorted(parts):
        rows = parts[name]
        if not isinstance(rows, (list, tuple)):
            raise ReportInputError("%s must be a list of report rows, got a %s" % (name, type(rows).__name__))
        for i, row in enumerate(rows):
            where = "%s[%d]" % (name, i)
            if not isinstance(row, Mapping) or not isinstance(row.get("host"), str) or not row["host"]:
                raise ReportInputError("%s must be a report row (a mapping with a host name), got %r" % (where, row))
            by_host[str(row["host"])] = as_data(row, where)
    return [by_host[h] for h in sorted(by_host)]
