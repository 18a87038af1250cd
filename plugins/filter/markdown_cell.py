# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Controller-side filter ``markdown_cell``: a value as the text of one Markdown table cell.

Documentation: markdown_cell.yml beside this file. The logic lives in plugin_utils/_report.py.
"""
from __future__ import annotations

from ansible_collections.gpuops.nvidia.plugins.plugin_utils import _report
from ansible_collections.gpuops.nvidia.plugins.plugin_utils._filters import refusing

_refusing = refusing()


@_refusing
def markdown_cell(value, code=False):
    """Any value -> one line of Markdown text that renders as the value and nothing else."""
    return _report.markdown_cell(value, code=bool(code))


class FilterModule:
    def filters(self):
        return {"markdown_cell": markdown_cell}
