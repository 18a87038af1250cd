#!/usr/bin/env python3
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""The checks around a release (`make release`, mk/galaxy.mk), and the rule tests/unit/meta/test_release.py holds
the tree to.

    tools/release.py check [--version V]   print galaxy.yml's version and exit 0 when it can be released now;
                                           else say why (exit 1); --version: what make read, must agree
    tools/release.py verify                after `antsibull-changelog release`: the version is in
                                           changelogs/changelog.yaml with a date, in CHANGELOG.rst, and no
                                           fragment is left

The rules (``tree_problems``: what the tree must satisfy at every commit; ``release_problems``: that plus
there being something to release):

* galaxy.yml's version is a semantic version (X.Y.Z, optionally -prerelease);
* it is not a released version while fragments wait in changelogs/fragments (they would ship in a tarball whose
  version says they are not there, and the next release could not list them under the right version);
* it is newer than the newest release;
* the step from the newest release is large enough for what the fragments say: breaking_changes,
  removed_features or major_changes need a major step (a minor one before 1.0.0: 0.x releases may break,
  semver item 4), minor_changes or deprecated_features a minor step, anything else a patch.

Standard library and PyYAML only (the project's venv has both); reads files, changes nothing.
"""
from __future__ import annotations

import argparse
import os
import re
import sys

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
#: semantic version 2.0.0 without build metadata (ansible-galaxy accepts it; antsibull-changelog sorts it)
SEMVER = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?")
#: fragment sections that need at least this step (the rest, e.g. bugfixes, security_fixes, trivial: a patch)
MAJOR_SECTIONS = ("breaking_changes", "removed_features", "major_changes")
MINOR_SECTIONS = ("minor_changes", "deprecated_features")
STEPS = ("patch", "minor", "major")


def parse(version):
    """(major, minor, patch, prerelease or None), or None when ``version`` is no semantic version."""
    m = SEMVER.fullmatch(version) if isinstance(version, str) else None
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4)


def _key(version):
    """Sort key: a prerelease sorts before its release (identifiers compared as text: enough for -rc1, -beta2)."""
    major, minor, patch, pre = parse(version)
    return major, minor, patch, pre is None, pre or ""


def read_version(repo=REPO):
    with open(os.path.join(repo, "galaxy.yml"), encoding="utf-8") as fh:
        version = (yaml.safe_load(fh) or {}).get("version")
    return version if isinstance(version, str) else str(version)


def released_versions(repo=REPO):
    path = os.path.join(repo, "changelogs", "changelog.yaml")
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as fh:
        return dict((yaml.safe_load(fh) or {}).get("releases") or {})


def pending_fragments(repo=REPO):
    """{fragment file name: [its sections]} of changelogs/fragments (antsibull-changelog reads *.yml and *.yaml;
    a fragment that is not a mapping is listed with no section: `antsibull-changelog lint` names its fault)."""
    base = os.path.join(repo, "changelogs", "fragments")
    out = {}
    for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        if not name.endswith((".yml", ".yaml")) or name.startswith("."):
            continue
        with open(os.path.join(base, name), encoding="utf-8") as fh:
            try:
                doc = yaml.safe_load(fh)
            except yaml.YAMLError:
                doc = None
        out[name] = sorted(doc) if isinstance(doc, dict) else []
    return out


def needed_step(fragments, last):
    """The smallest step from release ``last`` that the fragments allow: 'major', 'minor' or 'patch'."""
    sections = {s for secs in fragments.values() for s in secs}
    if sections & set(MAJOR_SECTIONS):
        return "major" if last and parse(last)[0] >= 1 else "minor"
    if sections & set(MINOR_SECTIONS):
        return "minor"
    return "patch"


def step(last, version):
    """'major', 'minor' or 'patch': how far ``version`` is from ``last`` (which it is newer than)."""
    a, b = parse(last), parse(version)
    if b[0] != a[0]:
        return "major"
    if b[1] != a[1]:
        return "minor"
    return "patch"


def _names(fragments, sections=None):
    names = [n for n, secs in fragments.items() if sections is None or set(secs) & set(sections)]
    return ", ".join(names[:6]) + (", ... (%d in all)" % len(names) if len(names) > 6 else "")


def tree_problems(version, released, fragments):
    """What is wrong with the tree's version (galaxy.yml) given the releases and the waiting fragments."""
    if parse(version) is None:
        return ["galaxy.yml's version %r is not a semantic version (X.Y.Z or X.Y.Z-prerelease)" % (version,)]
    bad = sorted(v for v in released if parse(str(v)) is None)
    if bad:
        return ["changelogs/changelog.yaml has releases that are no semantic version: %s" % ", ".join(map(str, bad))]
    releases = sorted((str(v) for v in released), key=_key)
    last = releases[-1] if releases else None
    if version in releases:
        if fragments:
            return ["galaxy.yml's version %s is already released (changelogs/changelog.yaml), but %d changelog "
                    "fragment(s) wait in changelogs/fragments (%s): they would ship in a tarball that calls itself %s. "
                    "Set galaxy.yml's version to the next release (at least a %s step: %s) in the same change that "
                    "adds the first fragment after a release"
                    % (version, len(fragments), _names(fragments), version, needed_step(fragments, version),
                       suggest(version, needed_step(fragments, version)))]
        return []
    if last is None:
        return []
    if _key(version) < _key(last):
        return ["galaxy.yml's version %s is older than the newest release %s" % (version, last)]
    need, have = needed_step(fragments, last), step(last, version)
    if STEPS.index(have) < STEPS.index(need):
        sections = {s for secs in fragments.values() for s in secs}
        why = MAJOR_SECTIONS if sections & set(MAJOR_SECTIONS) else MINOR_SECTIONS
        return ["galaxy.yml's version %s is a %s step from %s, but fragments (%s) need a %s step: use %s"
                % (version, have, last, _names(fragments, why), need, suggest(last, need))]
    return []


def suggest(last, kind):
    major, minor, patch, _pre = parse(last)
    if kind == "major":
        return "%d.0.0" % (major + 1)
    if kind == "minor":
        return "%d.%d.0" % (major, minor + 1)
    return "%d.%d.%d" % (major, minor, patch + 1)


def release_problems(version, released, fragments):
    """``tree_problems`` and, when the tree is fine, whether there is anything to release."""
    problems = tree_problems(version, released, fragments)
    if problems:
        return problems
    if version in released:
        return ["nothing to release: %s is released and changelogs/fragments holds no fragment" % version]
    if not fragments:
        return ["nothing to release: changelogs/fragments holds no fragment for %s (add the changes first)" % version]
    return []


def verify_problems(version, released, fragments, changelog_text):
    """After `antsibull-changelog release`: what is missing."""
    out = []
    entry = released.get(version)
    if not isinstance(entry, dict):
        out.append("changelogs/changelog.yaml has no release %s" % version)
    elif not entry.get("release_date"):
        out.append("release %s in changelogs/changelog.yaml has no release_date" % version)
    if "\nv%s\n" % version not in changelog_text:
        out.append("CHANGELOG.rst has no section v%s" % version)
    if fragments:
        out.append("fragments left in changelogs/fragments after the release: %s" % _names(fragments))
    return out


def main(argv=None, repo=REPO, out=None, err=None):
    out, err = out or sys.stdout, err or sys.stderr
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="can galaxy.yml's version be released now? prints it")
    check.add_argument("--version", help="the version make read from galaxy.yml (must agree)")
    sub.add_parser("verify", help="did the release land in changelog.yaml and CHANGELOG.rst, fragments consumed?")
    args = parser.parse_args(argv)
    version = read_version(repo)
    released, fragments = released_versions(repo), pending_fragments(repo)
    if args.command == "check":
        problems = release_problems(version, released, fragments)
        if args.version is not None and args.version != version:
            problems.insert(0, "make read version %r from galaxy.yml, YAML says %r: write it as a plain "
                               "`version: X.Y.Z` line" % (args.version, version))
    else:
        path = os.path.join(repo, "CHANGELOG.rst")
        text = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
        problems = verify_problems(version, released, fragments, text)
    if problems:
        for p in problems:
            err.write("release: %s\n" % p)
        err.write("release: nothing was changed\n" if args.command == "check" else "")
        return 1
    out.write(version + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
