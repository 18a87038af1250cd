# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""Counts of the faults suite, printed at the end of the run (conftest.pytest_terminal_summary)."""
from __future__ import annotations

import collections
import json
import os
import re

COLUMNS = ("kill_points", "trials", "runs", "file_checks", "files", "stray_temp", "stray_daemon")
HEADERS = {"kill_points": "kill pts", "trials": "trials", "runs": "module runs", "file_checks": "byte checks",
           "files": "files", "stray_temp": "strays@kill", "stray_daemon": "daemon-visible"}


class Stats(object):
    def __init__(self):
        self.by_module = collections.defaultdict(collections.Counter)
        self.paths = collections.defaultdict(set)
        self.by_fault = collections.Counter()
        self.strays = collections.defaultdict(collections.Counter)   # label -> {temp-file pattern: kill points}

    def add(self, label, fault, **counts):
        self.by_module[label].update(counts)
        self.by_fault[fault] += counts.get("trials", 0)

    def stray(self, label, rel, daemon_visible):
        """A temp file left by a killed run (``rel``: relative to the fake root)."""
        pattern = re.sub(r"\.gpuops-(validate-)?[^/]*?(\.toml|\.tmp|\.json)?$", r".gpuops-\1*\2", rel)
        self.strays[label][(pattern, daemon_visible)] += 1

    def file(self, label, path):
        self.paths[label].add(path)
        self.by_module[label]["files"] = len(self.paths[label])

    def totals(self):
        t = collections.Counter()
        for c in self.by_module.values():
            t.update(c)
        t["files"] = sum(len(v) for v in self.paths.values())
        return t

    def lines(self):
        if not self.by_module:
            return []
        w = max(len(k) for k in self.by_module) + 2
        head = "%-*s" % (w, "module / file") + "".join("%15s" % HEADERS[c] for c in COLUMNS)
        out = [head, "-" * len(head)]
        for label in sorted(self.by_module):
            c = self.by_module[label]
            out.append("%-*s" % (w, label) + "".join("%15d" % c.get(k, 0) for k in COLUMNS))
        t = self.totals()
        out.append("-" * len(head))
        out.append("%-*s" % (w, "total") + "".join("%15d" % t.get(k, 0) for k in COLUMNS))
        out.append("")
        out.append("trials by fault: " + ", ".join("%s %d" % (k, v) for k, v in sorted(self.by_fault.items())))
        if self.strays:
            out.append("")
            out.append("temp files left by SIGKILL (pattern: kill points; * = where the daemon loads config):")
            for label in sorted(self.strays):
                items = sorted(self.strays[label].items(), key=lambda kv: (not kv[0][1], kv[0][0]))
                out.append("  %s: %s" % (label, ", ".join("%s%s %d" % ("*" if vis else "", pat, n)
                                                           for (pat, vis), n in items)))
        return out

    def dump(self, path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump({"by_module": {k: dict(v) for k, v in self.by_module.items()}, "by_fault": dict(self.by_fault),
                   "totals": dict(self.totals()),
                   "strays": {k: {("daemon-visible " if vis else "") + pat: n for (pat, vis), n in v.items()}
                              for k, v in self.strays.items()}}, f, indent=2, sort_keys=True)


STATS = Stats()
