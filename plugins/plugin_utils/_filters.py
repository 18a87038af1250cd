# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""What every filter of the collection does with bad input (controller side).

PRIVATE: may change at any time; not for use outside gpuops.nvidia.
"""
from __future__ import annotations

import functools

from ansible.errors import AnsibleError, AnsibleFilterError, AnsibleUndefinedVariable
from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import GpuopsError

MALFORMED = (TypeError, ValueError, KeyError, AttributeError, IndexError)


def refusing(*known):
    """Decorator: bad input ends in AnsibleFilterError with the filter's name and what was wrong, never in a
    Python traceback. The collection's error family (module_utils/_errors.py) and any further ``known``
    classes give the message; anything the explicit checks missed is reported as malformed input
    (AnsibleError appends the cause's text)."""
    known = (GpuopsError,) + tuple(known)

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except AnsibleError:
                raise
            except known as e:
                raise AnsibleFilterError("%s: %s" % (fn.__name__, e)) from e
            except MALFORMED as e:
                raise AnsibleFilterError("%s: malformed input (%s)" % (fn.__name__, type(e).__name__)) from e
        return wrapper
    return decorate


def hostvar(hv, key, default=None):
    """``hv[key]`` of a host's hostvars, ``default`` when it is missing, None, or templates to something undefined."""
    try:
        value = hv.get(key, default)
    except AnsibleUndefinedVariable:  # a host var that templates to something undefined
        return default
    return default if value is None else value
