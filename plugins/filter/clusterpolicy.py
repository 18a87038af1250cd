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
)


def _plain(obj):
    """Ansible's tagged/lazy containers -> plain dict/list/str, so the mapping sees plain data."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, str):
        return str(obj)
    if isinstance(obj, bool) or obj is None:
        return obj
    if isinstance(obj, int):  # tagged ints and floats of Ansible 2.19 are subclasses
        return int(obj)
    if isinstance(obj, float):
        return float(obj)
    return obj


_refusing = refusing()


@_refusing
def clusterpolicy_to_vars(data, configmaps=None):
    return _to_vars(_plain(data), _plain(configmaps) if configmaps else None)


@_refusing
def clusterpolicy_group_vars(result, source=""):
    return group_vars_text(_plain(result), str(source or ""))


class FilterModule:
    def filters(self):
        return {
            "clusterpolicy_to_vars": clusterpolicy_to_vars,
            "clusterpolicy_group_vars": clusterpolicy_group_vars,
        }
