# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""The README's user path, walked as a new user walks it, on the lab inventory.

The commands between `<!-- user-path:begin -->` and `<!-- user-path:end -->` in README.md run one by one in
an empty directory with an empty HOME, through bash, as written. Only what the lab cannot be is changed, and
each change is named here:
- `ansible-galaxy collection install gpuops.nvidia` installs the built tarball (no Galaxy server here;
  `--no-deps`: kubernetes.core comes from the venv's `ansible` package, as in the other Galaxy tests);
- `pip install` is not run: the packages it names must import in the test environment;
- every `ansible-playbook` gets the lab's reachability file (`inventories/lab/hosts.yml`: node-root
  stand-ins on this machine) and `gpuops_k8s_api=false` (no API server in this lane).
A README step this test does not know fails it, so the README cannot grow a step nobody walked.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys

import pytest
import yaml

from conftest import BIN, REPO, summary

README = os.path.join(REPO, "README.md")
BEGIN, END = "<!-- user-path:begin -->", "<!-- user-path:end -->"
GALAXY_INSTALL = "ansible-galaxy collection install gpuops.nvidia"
LAB = ["-i", os.path.join(REPO, "inventories", "lab", "hosts.yml"), "-e", "gpuops_k8s_api=false"]


def user_path():
    """The README's user-path commands, comments and blank lines left out."""
    with open(README, encoding="utf-8") as fh:
        text = fh.read()
    assert text.count(BEGIN) == 1 and text.count(END) == 1, "README.md needs one %s ... %s block" % (BEGIN, END)
    block = text[text.index(BEGIN) + len(BEGIN):text.index(END)]
    fence = re.search(r"```[a-z]*\n(.*?)```", block, re.S)
    assert fence, "the user path is not a code block"
    steps = []
    for line in fence.group(1).splitlines():
        words = shlex.split(line, comments=True)
        if words:
            raw = re.sub(r"\s+#.*$", "", line).strip()
            assert shlex.split(raw) == words, "a step the test cannot take apart: %r" % line
            steps.append((raw, words))
    return steps


def tree_digest(path):
    h = hashlib.sha256()
    for base, dirs, files in sorted(os.walk(path)):
        dirs.sort()
        for name in sorted(files + [d for d in dirs if os.path.islink(os.path.join(base, d))]):
            full = os.path.join(base, name)
            h.update(os.path.relpath(full, path).encode() + b"\0")
            if os.path.islink(full):
                h.update(b"link:" + os.readlink(full).encode())
            elif os.path.isfile(full):
                with open(full, "rb") as fh:
                    h.update(fh.read())
    return h.hexdigest()


def rows_with_host(data):
    if isinstance(data, dict):
        if "host" in data and isinstance(data["host"], str):
            yield data
        for value in data.values():
            yield from rows_with_host(value)
    elif isinstance(data, list):
        for value in data:
            yield from rows_with_host(value)


def test_the_steps_are_the_ones_this_test_walks():
    """Runs without the tarball too: the README's block parses and every step is one this test knows."""
    steps = user_path()
    kinds = [classify(words) for _, words in steps]
    assert kinds.count("install") == 1 and kinds.index("install") == 0, steps
    assert "copy-inventory" in kinds and kinds.count("playbook-check") == 1 and kinds.count("playbook") >= 1, kinds
    assert kinds.index("copy-inventory") < kinds.index("playbook-check") < kinds.index("playbook"), kinds


def classify(words):
    line = " ".join(words)
    if line == GALAXY_INSTALL:
        return "install"
    if words[:4] in (["python3", "-m", "pip", "install"], ["pip", "install"]):
        return "pip"
    if words[:2] == ["cp", "-r"] and len(words) == 4:
        return "copy-inventory"
    if words[0] == "ansible-playbook" and words[1] == "gpuops.nvidia.site":
        return "playbook-check" if "--check" in words else "playbook"
    pytest.fail("README.md's user path has a step this test does not walk: %r" % line)
    return None


def test_readme_user_path(tarball, tmp_path):
    home, work, roots = tmp_path / "home", tmp_path / "work", tmp_path / "roots"
    for d in (home, work):
        d.mkdir()
    subprocess.run([sys.executable, os.path.join(REPO, "tests", "fixtures", "noderoots", "build.py"),
                    "--out", str(roots)], check=True, capture_output=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update({"HOME": str(home), "PATH": BIN + os.pathsep + env.get("PATH", ""), "GPUOPS_LAB_ROOTS": str(roots),
                "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0", "PYTHONDONTWRITEBYTECODE": "1"})
    before = tree_digest(str(roots))

    def bash(line, timeout=900):
        """One step through bash in the user's directory, as the user types it."""
        res = subprocess.run(["bash", "-c", line], cwd=str(work), env=env, capture_output=True, text=True,
                             timeout=timeout)
        assert res.returncode == 0, "%s\n%s\n%s" % (line, res.stdout[-8000:], res.stderr[-3000:])
        return res

    installed = home / ".ansible" / "collections" / "ansible_collections" / "gpuops" / "nvidia"
    inventory, walked = None, []
    for line, words in user_path():
        kind = classify(words)
        walked.append(kind)
        if kind == "install":
            bash("ansible-galaxy collection install --no-deps " + shlex.quote(tarball))
            assert (installed / "MANIFEST.json").is_file(), "not installed where the README's next step looks"
        elif kind == "pip":
            names = [w for w in words[words.index("install") + 1:] if not w.startswith("-")]
            res = subprocess.run([sys.executable, "-c", "import " + ", ".join(n.replace("-", "_") for n in names)],
                                 capture_output=True, text=True, timeout=120)
            assert res.returncode == 0, res.stderr
        elif kind == "copy-inventory":
            src = str(home) + words[2][1:] if words[2].startswith("~/") else words[2]
            assert src.startswith(str(installed)), "the README copies the inventory from elsewhere: " + words[2]
            bash(line)
            inventory = work / words[3] / "hosts.yml"
            assert inventory.is_file(), "the copied inventory has no hosts.yml"
        else:
            assert inventory is not None and "-i" in words, words
            assert os.path.normpath(str(work / words[words.index("-i") + 1])) == str(inventory), words
            res = bash(line + " " + " ".join(shlex.quote(w) for w in LAB))
            recap = res.stdout[res.stdout.rfind("PLAY RECAP"):]
            assert "failed=0" in recap and not re.search(r"failed=[1-9]|unreachable=[1-9]", recap), recap
            assert tree_digest(str(roots)) == before, "a run changed a node root stand-in"
            if kind == "playbook-check":
                assert not (work / "reports").exists(), "check mode wrote the report files"
            summary("README user path: %s -- rc 0" % line)
    with open(inventory, encoding="utf-8") as fh:
        hosts = _hosts(yaml.safe_load(fh))
    report = work / "reports" / "readiness.json"
    assert report.is_file(), "the report is not where the README says (gpuops_report_dir)"
    for name in ("readiness.md", "readiness.html"):
        assert (work / "reports" / name).stat().st_size > 0, name
    with open(report, encoding="utf-8") as fh:
        reported = {row["host"] for row in rows_with_host(json.load(fh))}
    assert reported == hosts, "report hosts %s, inventory hosts %s" % (sorted(reported), sorted(hosts))
    assert walked[-1] == "playbook"


def _hosts(group):
    """Every host name under an inventory group (YAML inventory format; the top level holds `all`)."""
    if not isinstance(group, dict):
        return set()
    out = set((group.get("hosts") or {}).keys()) | _hosts(group.get("all"))
    for child in (group.get("children") or {}).values():
        out |= _hosts(child)
    return out
