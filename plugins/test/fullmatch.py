# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Jinja test ``fullmatch``: the whole string matches a regular expression (Python's ``re.fullmatch``).

Documentation: fullmatch.yml beside this file.  The roles check their inputs with it instead of
``match('^...$')``, whose ``$`` also matches before a final newline.
"""
from __future__ import annotations

import re


def fullmatch(value, pattern, ignorecase=False):
    """True when ``value`` is a string and all of it matches ``pattern``; any other value never matches."""
    if not isinstance(value, str):
        return False
    return re.fullmatch(pattern, value, re.IGNORECASE if ignorecase else 0) is not None


class TestModule:
    def tests(self):
        return {"fullmatch": fullmatch}
