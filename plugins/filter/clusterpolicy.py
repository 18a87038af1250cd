# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""GPU Operator ClusterPolicy -> gpuops.nvidia group_vars (controller side; the mapping itself is in
plugins/plugin_utils/_clusterpolicy.py)."""
from __future__ import annotations

# Documentation: one file per filter (clusterpolicy_to_vars.yml, clusterpolicy_group_vars.yml beside
# this file), as ansible-doc reads a multi-filter file's docs from <filter name>.yml beside it.

from ansible_collections.gpuops.nvidia.plugins.plugin_utils._filters import refusing
from ansible_collections.gpuops.nvidia.plugins.plugin_utils._clusterpolicy import (
    clusterpolicy_to_vars as _to_vars,
    group_vars_text,
    plain,
)

_refusing = refusing()


@_refusing
def clusterpolicy_to_vars(data, configmaps=None):
    return _to_vars(data, configmaps or None)


@_refusing
def clusterpolicy_group_vars(result, source=""):
    return group_vars_text(plain(result, "the clusterpolicy_to_vars result"), str(source or ""))


class FilterModule:
    def filters(self):
        return {
            "clusterpolicy_to_vars": clusterpolicy_to_vars,
            "clusterpolicy_group_vars": clusterpolicy_group_vars,
        }
