# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Controller-side filter ``report_view``: what the readiness report shows, from its rows.

Documentation: report_view.yml beside this file. The logic lives in plugin_utils/_report_view.py (the SVG
charts in plugin_utils/_report_svg.py).
"""
from __future__ import annotations

from ansible_collections.gpuops.nvidia.plugins.plugin_utils import _report_view
from ansible_collections.gpuops.nvidia.plugins.plugin_utils._filters import refusing

_refusing = refusing()


@_refusing
def report_view(rows, stages=None, run=None):
    """Report rows -> run details, per-host texts, fleet roll-up with SVG charts, stage matrix, console text."""
    return _report_view.view(rows, stages, run)


class FilterModule:
    def filters(self):
        return {"report_view": report_view}
