# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""How long the collection's own Kubernetes modules wait for the API server, and when they ask again (not
kubernetes.core options, which has none for this: set them per task, or in module_defaults naming these modules,
not for group/gpuops.nvidia.k8s, whose kubernetes.core modules would refuse them)."""
from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  connect_timeout:
    description:
      - Seconds to wait for a connection to the API server, per request (from 0, not included, to 3600).
    type: float
    default: 10
  request_timeout:
    description:
      - Seconds to wait for the API server's answer once a request is sent - the longest silence while the answer is
        awaited or read (from 0, not included, to 3600). The API server ends a request of its own after 60 s
        (its C(--request-timeout)).
      - Every request has it, the API discovery the C(kubernetes) library makes included; a request that times out
        fails the task (an apply, the object), naming the request, for example
        C(GET /api/v1/nodes?limit=500 timed out after 60 s (read)). A request that timed out is not sent again.
      - Within a wait (C(wait.timeout) of M(gpuops.nvidia.k8s_bulk_info)), each request's timeouts are cut to what
        is left of the wait.
      - An answer C(429 Too Many Requests) is retried after its C(Retry-After) (at most 30 s; a longer one, or one
        past the wait's end, fails at once with the API server's answer). Reads and server-side applies (both
        idempotent) are also retried on C(500), C(502), C(503) and C(504) and on a connection lost before an
        answer, after C(Retry-After) or 0.5, 1 and 2 s. At most 4 tries per request; the failure says how many.
    type: float
    default: 60
"""
