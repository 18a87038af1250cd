# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Lookup ``report_parts``: the readiness report's parts of earlier job slices, joined, as data.

The logic lives in plugin_utils/_report.py; this reads the variables as Ansible holds them, before any
templating (the ``vars`` lookup renders every template it finds in them).
"""
from __future__ import annotations

DOCUMENTATION = r"""
name: report_parts
short_description: The readiness report parts of earlier AWX job slices, joined into one list of rows
version_added: 0.3.0
author: gpuops.nvidia contributors (@gpuops)
description:
  - Reads every variable whose name starts with C(gpuops_report_part_) - the rows each job slice of the
    C(gpuops.nvidia.report) role published with C(set_stats), which an AWX workflow hands to its next job as
    extra variables - and joins them into one list of rows, one per host (a host in several parts keeps the
    row of the last part in name order), sorted by host.
  - The rows are returned as plain data. Ansible trusts extra variables loaded from a file (as AWX passes them)
    as templates, and the C(ansible.builtin.vars) lookup would render a C({{ }}) that a node put into a GPU
    name or a label; here it stays text.
  - A part that is not a list of mappings with a C(host) name is refused with the variable's name.
  - Used by the report role's C(merge) entry point (C(playbooks/report_merge.yml)).
options:
  _terms:
    description: None; the parts are found by their names.
    required: false
"""

EXAMPLES = r"""
- name: Join the parts
  ansible.builtin.set_fact:
    report_rows: "{{ query('gpuops.nvidia.report_parts') }}"
"""

RETURN = r"""
_list:
  description: The report rows (mappings with C(host) and the report's columns), sorted by host.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import GpuopsError
from ansible_collections.gpuops.nvidia.plugins.plugin_utils import _report


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        if terms:
            raise AnsibleLookupError("report_parts takes no terms (it reads every %s* variable)" % _report.PART_PREFIX)
        variables = variables or {}
        parts = {name: variables[name] for name in list(variables) if str(name).startswith(_report.PART_PREFIX)}
        try:
            return _report.join_parts(parts)
        except GpuopsError as e:
            raise AnsibleLookupError("report_parts: %s" % e) from e
