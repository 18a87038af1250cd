# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""How the collection's own Kubernetes modules read a LIST (not a kubernetes.core option: set it per task, not in
module_defaults for group/gpuops.nvidia.k8s, whose kubernetes.core modules would refuse it)."""
from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  list_page_size:
    description:
      - Objects per page when a whole kind is listed (the API's C(limit) and C(continue), as C(kubectl) reads with
        C(--chunk-size)); each page is one request. A fleet's Nodes with their status run to tens of megabytes in
        one answer; pages keep each answer, and the API server's work per request, bounded.
      - C(0) lists in one request.
      - A list whose continue token expires before its last page (the API server keeps the snapshot a few
        minutes) is read again from the start, once, in one request.
    type: int
    default: 500
"""
