# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""The collection's one family of errors, and the one place a module turns them into ``fail_json``.

Every error the collection's logic raises on purpose derives from :class:`GpuopsError`, through one of four
meanings a caller can act on:

    InputError   the request (parameters, inventory, a config file's content, the host's state) is refused
                 before anything changed; ValueError too, so input checks written as ``except ValueError``
                 keep working
    HostError    the host cannot do what is asked (a library, tool or driver call missing or failing); nothing
                 was changed because of it
    ApplyError   a change failed part way; what this run changed was put back as far as it could be, and the
                 error's fields say what is left
    VerifyError  (an ApplyError) the change went through, but reading the host back does not show it

A module catches :class:`GpuopsError` once and calls :func:`fail`; the failure result then carries ``msg``
(the error's sentence), ``errors`` (every problem, when there were several), ``remediation`` (what to do,
when known) and the fields the error class names in ``result_fields`` (what is left after a rollback).
Controller plugins (filters) turn the same family into AnsibleFilterError (plugin_utils/_filters.py).

Targets run this file: stdlib only.
"""
from __future__ import annotations


class GpuopsError(Exception):
    """Base of the family.  ``str()`` is the sentence a user reads.

    ``errors``: each problem found (several are reported at once rather than one per run); ``remediation``:
    what to do about it; ``result_fields``: names of attributes a module's failure result includes.
    """

    errors = ()
    remediation = None
    result_fields = ()

    def __init__(self, msg=None, errors=None, remediation=None):
        errors = [str(e) for e in (errors or ())]
        super().__init__("; ".join(errors) if msg is None else msg)
        if errors:
            self.errors = errors
        if remediation:
            self.remediation = remediation

    def result(self):
        """The keys a module's failure result gets from this error (besides ``msg``)."""
        out = {}
        if self.errors:
            out["errors"] = list(self.errors)
        if self.remediation:
            out["remediation"] = self.remediation
        for name in self.result_fields:
            out[name] = getattr(self, name, None)
        return out


class InputError(GpuopsError, ValueError):
    """Refused before any change: bad parameters or inventory, a config that cannot be edited safely, or a host
    state that makes the request unsafe."""


class HostError(GpuopsError):
    """The host lacks what the request needs, or a library, tool or driver call failed; nothing was changed
    because of it."""


class ApplyError(GpuopsError):
    """A change failed part way; what this run changed was put back as far as possible (``result_fields`` name
    what is left)."""


class VerifyError(ApplyError):
    """The change went through, but reading the host back does not show the requested state."""


def fail(module, exc, msg=None, **result):
    """The one place an error of the family becomes a module failure: ``msg`` (default: the error's sentence,
    or ``msg`` given here, e.g. with a prefix), the error's own keys, then ``result`` (what the module has
    gathered so far; its keys win)."""
    out = exc.result() if isinstance(exc, GpuopsError) else {}
    out.update(result)
    out.pop("msg", None)
    module.fail_json(msg=str(exc) if msg is None else msg, **out)
