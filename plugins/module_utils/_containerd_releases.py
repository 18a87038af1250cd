# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""containerd release lines and config versions: the one place these facts live.

PRIVATE: this module_utils file may change at any time; do not import it from
outside the collection.

Data only (no imports, no code): ``_container_runtime`` takes its CRI plugin table
from here, the build scripts (mk/runtime.mk, mk/gpu.mk, tests/lab/gpu/build.sh) read
the lane versions through ``docs/render_data.py --get``, and the tables in
docs/runtime.md are generated from it (``python docs/render_data.py --write``;
tests/unit/meta/test_containerd_releases.py fails when they are stale, or when
another file names a lane version itself).

Sources: the containerd sources of the built lane (RELEASES.md "Daemon
Configuration": config version 2 needs containerd 1.3, 3 needs 2.0, 4 needs 2.3;
a release reads every lower version), what the runtime lane observed on the
real daemons (tests/lab/runtime) and nvidia-ctk's behaviour
(../shared/reference/gpu-operator.md).
"""

#: One row per containerd config ``version`` the module edits.
#:   version     the top-level ``version`` key (a file without one is read as 1)
#:   cri_plugin  the table that holds ``containerd.runtimes``
#:   drop_in     drop_in_path works for it (version 1 configs are refused)
#:   enable_cdi  the module writes ``enable_cdi = true`` when asked (containerd 2.x, config 3+,
#:               has CDI on by default)
CONFIG_VERSIONS = (
    {"version": 1, "cri_plugin": ("plugins", "cri"), "drop_in": False, "enable_cdi": True},
    {"version": 2, "cri_plugin": ("plugins", "io.containerd.grpc.v1.cri"), "drop_in": True, "enable_cdi": True},
    {"version": 3, "cri_plugin": ("plugins", "io.containerd.cri.v1.runtime"), "drop_in": True, "enable_cdi": False},
    {"version": 4, "cri_plugin": ("plugins", "io.containerd.cri.v1.runtime"), "drop_in": True, "enable_cdi": False},
)

#: One row per containerd release line, oldest first.
#:   release         major.minor
#:   config_version  the ``version`` its ``containerd config default`` writes (the highest it reads)
#:   imports         how a plugin table from an ``imports`` file combines with the same table of the
#:                   importing file: "replace" (before 2.1) or "merge" (2.1+); the module's drop-in
#:                   copies the whole CRI section so both give the same result
#:   cdi             "none" (1.6), "enable_cdi" (1.7: off unless enable_cdi = true), "default" (2.x)
#:   lane            None, or the exact version a test lane runs:
#:                   {"name": "debian" | "go", "version": ..., "source": ...}
#:                   "debian": the runtime lane's apt package (Debian 12, not pinned: the version
#:                   observed); "go": built from Go modules at exactly this version by
#:                   `make runtime-containerd2` and `make gpu-bundle` (runtime lane, GPU node lane)
RELEASES = (
    {"release": "1.6", "config_version": 2, "imports": "replace", "cdi": "none",
     "lane": {"name": "debian", "version": "1.6.20", "source": "runtime lane: Debian 12 package, apt"}},
    {"release": "1.7", "config_version": 2, "imports": "replace", "cdi": "enable_cdi", "lane": None},
    {"release": "2.0", "config_version": 3, "imports": "replace", "cdi": "default", "lane": None},
    {"release": "2.1", "config_version": 3, "imports": "merge", "cdi": "default", "lane": None},
    {"release": "2.2", "config_version": 3, "imports": "merge", "cdi": "default", "lane": None},
    {"release": "2.3", "config_version": 4, "imports": "merge", "cdi": "default", "lane": None},
    {"release": "2.4", "config_version": 4, "imports": "merge", "cdi": "default",
     "lane": {"name": "go", "version": "v2.4.2", "source": "runtime and GPU node lanes: built from Go modules"}},
)
