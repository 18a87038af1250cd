#!/usr/bin/env python3
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Render a sample readiness report with the real role and take the screenshots of docs/report.md.

    .venv/bin/python tools/report_screenshots.py            # writes docs/images/report-*.png
    .venv/bin/python tools/report_screenshots.py --keep DIR # and keeps the report and the run's files in DIR

What it does:

1. builds the lab's node roots (tests/fixtures/noderoots: the real H200 capture, an HGX H100 with driver 570,
   an A100 passthrough host, an L40S vGPU host with the IOMMU off, a CPU node ...);
2. runs playbooks/site.yml of this checkout on the example inventory with the lab's stand-ins
   (inventories/example + inventories/lab, as `make lab` does, without its VM and API server:
   gpuops_k8s_api=false), writing readiness.{json,md,html} -- so the stage plan, the facts, the findings and
   every text are what the role makes of real node trees;
3. adds the two things a run without a cluster and without real hosts cannot have, and says so on the
   command line: gpu-c01 validated by the cluster (report_validated_nodes) and containerd found on it by the
   container_toolkit stage (its registered _container_toolkit_binaries; stand-ins skip that stage);
4. takes screenshots of readiness.html with headless Chromium: the top of the page (run details, roll-up
   charts, stage tables, host table), a host with problems (its section cut out of the page, as the report
   shows it) and the validated container node with its labels opened.

Chromium is not a test dependency: `make test` never runs this. On Debian: apt-get install -y chromium
(and pngquant, optional: the PNGs are quantised to 256 colours when it is there, a third of the size).
Each PNG is checked to stay under 300 KB.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
IMAGES = os.path.join(REPO, "docs", "images")
LIMIT = 300 * 1024
WINDOW = "1280,1600"
# hosts whose sample state the lab cannot produce (see step 3 above)
VALIDATED = "gpu-c01.example.net"
FOUND = {"results": [{"item": {"key": "containerd", "value": "/usr/bin/containerd"}, "stat": {"exists": True}},
                     {"item": {"key": "crio", "value": "/usr/bin/crio"}, "stat": {"exists": False}},
                     {"item": {"key": "docker", "value": "/usr/bin/dockerd"}, "stat": {"exists": False}}]}


def run(cmd, **kw):
    print("+ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, **kw)


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    sys.exit("no Chromium found: apt-get install -y chromium (Debian), then run this again")


def render(work):
    """site.yml on the example inventory with the lab's stand-ins; returns the report directory."""
    roots = os.path.join(work, "roots")
    run([sys.executable, os.path.join(REPO, "tests", "fixtures", "noderoots", "build.py"), "--out", roots],
        stdout=subprocess.DEVNULL)
    coll = os.path.join(work, "collections", "ansible_collections", "gpuops")
    os.makedirs(coll, exist_ok=True)
    os.symlink(REPO, os.path.join(coll, "nvidia"))
    overlay = os.path.join(work, "sample.yml")
    with open(overlay, "w", encoding="utf-8") as fh:
        json.dump({"all": {"hosts": {VALIDATED: {"_container_toolkit_binaries": FOUND}}}}, fh)
    extra = os.path.join(work, "extra.json")
    with open(extra, "w", encoding="utf-8") as fh:
        json.dump({"report_validated_nodes": [VALIDATED], "report_validator_targets": [VALIDATED, "gpu-c02.example.net"],
                   "gpuops_k8s_api": False, "gpuops_report_dir": os.path.join(work, "report"),
                   "ansible_python_interpreter": sys.executable}, fh)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(work, "collections"),
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_LOCAL_TEMP=os.path.join(work, "tmp"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0", GPUOPS_LAB_ROOTS=roots)
    playbook = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    if not os.path.exists(playbook):
        playbook = shutil.which("ansible-playbook") or playbook
    with open(os.path.join(work, "site.log"), "w", encoding="utf-8") as log:
        run([playbook, os.path.join(REPO, "playbooks", "site.yml"), "-i", "inventories/example/hosts.yml",
             "-i", "inventories/lab/hosts.yml", "-i", overlay, "-e", "@" + extra], cwd=REPO, env=env, stdout=log,
            stderr=subprocess.STDOUT)
    return os.path.join(work, "report")


def shoot(browser, page, png, work):
    profile = tempfile.mkdtemp(prefix="chromium-", dir=work)
    run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--force-device-scale-factor=1",
         "--user-data-dir=" + profile, "--window-size=" + WINDOW, "--screenshot=" + png,
         "file://" + page], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    quant = shutil.which("pngquant")
    if quant:  # 256 colours: the same picture for flat colours and text, a third of the bytes
        run([quant, "--force", "--skip-if-larger", "--strip", "--speed", "1", "--quality", "70-95", "--ext", ".png", png])
    size = os.path.getsize(png)
    print("%s: %d KB" % (os.path.relpath(png, REPO), size // 1024))
    if size > LIMIT:
        sys.exit("%s is over %d KB" % (png, LIMIT // 1024))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keep", help="keep the run's files (node roots, log, report) in this directory")
    args = p.parse_args()
    browser = chromium()
    work = os.path.abspath(args.keep) if args.keep else tempfile.mkdtemp(prefix="gpuops-report-")
    os.makedirs(work, exist_ok=True)
    try:
        report = render(work)
        page = os.path.join(report, "readiness.html")
        os.makedirs(IMAGES, exist_ok=True)
        shoot(browser, page, os.path.join(IMAGES, "report-overview.png"), work)
        with open(page, encoding="utf-8") as fh:
            html = fh.read()
        # the hosts' sections, cut out of the page (a headless screenshot shows a page's top only): the host
        # with problems first, as the report shows it (labels collapsed) ...
        hosts = re.findall(r'<h2 id="host-\d+">.*?(?=<h2 id="host-|</body>)', html, re.S)
        head, tail = html.split("<body>", 1)[0], "</body>\n</html>\n"
        problem = next(h for h in hosts if '<table class="problems">' in h)
        part = os.path.join(report, "readiness-problem.html")
        with open(part, "w", encoding="utf-8") as fh:
            fh.write(head + "<body>\n" + problem + tail)
        shoot(browser, part, os.path.join(IMAGES, "report-problem.png"), work)
        # ... and the validated container node with its labels opened (a click on "N labels" in the report)
        node = next(h for h in hosts if ">%s</h2>" % VALIDATED in h).replace('<details class="labels">',
                                                                            '<details class="labels" open>', 1)
        part = os.path.join(report, "readiness-labels.html")
        with open(part, "w", encoding="utf-8") as fh:
            fh.write(head + "<body>\n" + node + tail)
        shoot(browser, part, os.path.join(IMAGES, "report-host.png"), work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
