#!/usr/bin/env python3
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Compare NVIDIA gpu-feature-discovery's labels with the ones gpu_facts computed.

Runs on the GPU node (Python 3.12, standard library only):

    compare_labels.py --gfd gfd-labels.txt --ours gpu_facts.json --out compare.json

--gfd   GFD's output file (``--oneshot --output-file``): one ``key=value`` per line.
--ours  JSON: a dict of labels, or a gpu_facts result holding them (the module's return
        ``{"ansible_facts": {"gpu": {"labels": {...}}}}``, ``{"gpu": {...}}`` or the
        ``ansible_facts.gpu`` dict itself); ``ansible -m`` output (``host | SUCCESS => {...}``)
        is accepted too.
--out   JSON report: ``equal``, ``only_gfd``, ``only_ours`` (key -> value), ``different``
        (key -> {gfd, ours}), ``ignored``, ``counts`` and ``match``.

Only ``nvidia.com/*`` keys are compared; ``nvidia.com/gfd.timestamp`` (and any ``--ignore``
key) is left out.  Exit status: 0 when the label sets are equal, 1 on any difference,
2 on unusable input.
"""
from __future__ import annotations

import argparse
import json
import sys

PREFIX = "nvidia.com/"
ALWAYS_IGNORED = ("nvidia.com/gfd.timestamp",)


class InputError(Exception):
    pass


def read_gfd(path):
    """GFD's output file -> {key: value} (``key=value`` lines; blanks and ``#`` comments skipped)."""
    labels = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            key, sep, value = line.partition("=")
            if not sep or not key.strip():
                raise InputError("%s:%d: not a key=value line: %r" % (path, number, line))
            labels[key.strip()] = value
    return labels


def _load_json(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        return json.loads(text)
    except ValueError:
        # `ansible HOST -m gpuops.nvidia.gpu_facts` prints "host | SUCCESS => {...}"
        head, sep, tail = text.partition("=>")
        if sep and "|" in head:
            try:
                return json.loads(tail)
            except ValueError:
                pass
        raise InputError("%s: not JSON" % path)


def _is_label_dict(data):
    return isinstance(data, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in data.items())


def extract_labels(data):
    """A dict of labels from any of the shapes --ours accepts."""
    if isinstance(data, dict):
        if isinstance(data.get("ansible_facts"), dict):
            return extract_labels(data["ansible_facts"])
        if isinstance(data.get("gpu"), dict):
            return extract_labels(data["gpu"])
        if isinstance(data.get("labels"), dict):
            labels = data["labels"]
            if _is_label_dict(labels):
                return labels
        if _is_label_dict(data):
            return data
    raise InputError("--ours: expected a dict of labels or a gpu_facts result "
                     "(ansible_facts.gpu.labels); found none")


def read_ours(path):
    return extract_labels(_load_json(path))


def compare(gfd, ours, ignore=()):
    ignored = set(ALWAYS_IGNORED) | set(ignore)

    def keep(labels):
        return {k: v for k, v in labels.items() if k.startswith(PREFIX) and k not in ignored}

    g, o = keep(gfd), keep(ours)
    report = {
        "equal": {k: g[k] for k in sorted(g) if k in o and o[k] == g[k]},
        "only_gfd": {k: g[k] for k in sorted(g) if k not in o},
        "only_ours": {k: o[k] for k in sorted(o) if k not in g},
        "different": {k: {"gfd": g[k], "ours": o[k]} for k in sorted(g) if k in o and o[k] != g[k]},
        "ignored": sorted(k for k in set(gfd) | set(ours) if k in ignored),
    }
    report["counts"] = {
        "gfd": len(g), "ours": len(o), "equal": len(report["equal"]),
        "only_gfd": len(report["only_gfd"]), "only_ours": len(report["only_ours"]),
        "different": len(report["different"]),
    }
    report["match"] = not (report["only_gfd"] or report["only_ours"] or report["different"])
    return report


def table(report):
    rows = []
    for key, value in report["equal"].items():
        rows.append(("=", key, value, value))
    for key, value in report["only_gfd"].items():
        rows.append(("<", key, value, "(absent)"))
    for key, value in report["only_ours"].items():
        rows.append((">", key, "(absent)", value))
    for key, pair in report["different"].items():
        rows.append(("!", key, pair["gfd"], pair["ours"]))
    rows.sort(key=lambda r: r[1])
    header = ("", "label", "gfd", "ours")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(4)]
    fmt = "%-{0}s  %-{1}s  %-{2}s  %s".format(*widths[:3])
    lines = [fmt % header, fmt % tuple("-" * w for w in widths)]
    lines.extend(fmt % r for r in rows)
    c = report["counts"]
    lines.append("")
    lines.append("gfd %d, ours %d: %d equal, %d only GFD (<), %d only ours (>), %d different (!)%s" % (
        c["gfd"], c["ours"], c["equal"], c["only_gfd"], c["only_ours"], c["different"],
        "; ignored: " + ", ".join(report["ignored"]) if report["ignored"] else ""))
    lines.append("MATCH" if report["match"] else "DIFFERENT")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gfd", required=True, help="GFD output file (key=value lines)")
    parser.add_argument("--ours", required=True, help="JSON: labels dict or gpu_facts result")
    parser.add_argument("--out", help="write the JSON report here")
    parser.add_argument("--ignore", action="append", default=[], metavar="KEY",
                        help="another label key to leave out (repeatable)")
    args = parser.parse_args(argv)
    try:
        report = compare(read_gfd(args.gfd), read_ours(args.ours), args.ignore)
    except (InputError, OSError) as exc:
        print("compare_labels: %s" % exc, file=sys.stderr)
        return 2
    report["inputs"] = {"gfd": args.gfd, "ours": args.ours}
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2, sort_keys=True)
            f.write("\n")
    print(table(report))
    return 0 if report["match"] else 1


if __name__ == "__main__":
    sys.exit(main())
