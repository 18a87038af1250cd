"""Host-side stages over a fleet of node-root hosts, against the Ansible floor (issue 18, host side).

What it runs, each as one ansible-playbook process on the same generated inventory of --hosts hosts
(every host ``ansible_connection: local``, its ``gpu_facts_root`` one of the node root trees of
tests/fixtures/noderoots, built under .lab/roots; products mixed so the GPUs vary):

- ``startup``: a play over every host with no task (process start, inventory, plugin loading);
- ``floor``: a play over every host with one ``ansible.builtin.ping`` (the Ansible floor);
- ``discovery``: the installed collection's playbooks/discovery.yml (role gpuops.nvidia.discovery);
- ``preflight``: site.yml's first play, verbatim (role gpuops.nvidia.preflight on localhost, reading
  every host's vars), with -e gpuops_empty_stage=fail so it must really pass;
- ``preflight+discovery``: site.yml's first two entries (preflight, then import of discovery.yml),
  which is how site.yml runs them.

Each is run --repeat times per forks value, interleaved (one round = every stage once) so that every
stage sees the same background load; ``os.getloadavg()`` is recorded before each run.  Per-task wall time
comes from the ``ansible.posix.profile_tasks`` callback (enabled for every run, the floor included).
The in-process logic time of gpu_facts on each tree (no Ansible, no interpreter start) is measured
too, to split the gpu_facts task into module logic and everything around it.

Command that made results.json (repository root):
    .venv/bin/python benchmarks/host_stages/run.py --hosts 200 --repeat 3 --forks 20 50 --pipelining \
        --out benchmarks/host_stages/results.json

Needs the installed collection (.collections, `make install`) and the node roots
(tests/fixtures/noderoots/build.py --out .lab/roots; run.py builds any that are missing).
Python standard library only.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
VENV_BIN = os.path.join(REPO, ".venv", "bin")
PLAYBOOK = os.path.join(VENV_BIN, "ansible-playbook")
INSTALLED = os.environ.get("GPUOPS_COLLECTIONS", os.path.join(REPO, ".collections"))
ROOTS = os.environ.get("GPUOPS_LAB_ROOTS", os.path.join(REPO, ".lab", "roots"))
CACHE = os.path.join(os.environ.get("GPUOPS_CACHE", os.path.expanduser("~/.cache/gpuops")), "bench-hosts")
# The installed collection is copied here at start and every run uses the copy: a `make install` in the
# same tree during the benchmark (rm -rf, then install) must not change or break the runs.
COLLECTIONS = os.path.join(CACHE, "collections")
BOOKS = os.path.join(COLLECTIONS, "ansible_collections", "gpuops", "nvidia", "playbooks")

# One block of ten hosts, repeated: (node root tree, workload group or None for a CPU node).
# The same trees and kinds as the AWX lab fleet and the example inventory: H200 capture replayed,
# 8x H100 + NVSwitch, T4 on nouveau, two RTX A6000, A100s on vfio-pci, L40S without IOMMU, no GPU.
MIX = [
    ("h200", "gpu_container"),
    ("h200", "gpu_container"),
    ("h200", "gpu_container"),
    ("hgx-h100", "gpu_container"),
    ("hgx-h100", "gpu_container"),
    ("nouveau", "gpu_container"),
    ("workstation", "vm_passthrough"),
    ("passthrough", "vm_passthrough"),
    ("iommu-off", "vm_vgpu"),
    ("no-gpu", None),
]
KINDS = {"gpu_container": "container", "vm_passthrough": "vm-passthrough", "vm_vgpu": "vm-vgpu"}

# site.yml's first play, as written there (checked against the installed site.yml at start).
PREFLIGHT_PLAY = """\
- name: Preflight -- the stages, the hosts each runs on, and the inventory's sense (changes nothing)
  hosts: localhost
  connection: local
  gather_facts: false
  any_errors_fatal: true
  roles:
    - role: gpuops.nvidia.preflight
"""
DISCOVERY_IMPORT = """\
- name: Discovery (gpu_facts on every node; NFD/GFD labels computed)
  ansible.builtin.import_playbook: %s
  when: "'discovery' not in (gpuops_skip_stages | default([]))"
""" % os.path.join(BOOKS, "discovery.yml")


def write_inventory(n, path):
    """YAML (written as JSON, which YAML reads) inventory of n node-root hosts, grouped as the example's."""
    groups = {g: {} for g in KINDS}
    cpu = {}
    for i in range(n):
        tree, group = MIX[i % len(MIX)]
        name = "node-%03d-%s" % (i, tree)
        hv = {"gpu_facts_root": os.path.join(ROOTS, tree)}
        (groups[group] if group else cpu)[name] = hv
    inv = {"all": {
        "vars": {
            "ansible_connection": "local",
            "ansible_python_interpreter": "{{ ansible_playbook_python }}",
            # node-root stand-ins, as in inventories/lab/hosts.yml
            "gpuops_stand_in": True,
        },
        "children": {
            "gpu_nodes": {"children": {
                g: {"hosts": hosts, "vars": dict(
                    {"gpu_workload": KINDS[g]},
                    # what inventories/example/group_vars/vm_vgpu.yml sets: preflight refuses a vm-vgpu host without it
                    **({"gpuops_vgpu_device_manager_config": {"version": "v1", "vgpu-configs": {
                        "default": [{"devices": "all", "vgpu-devices": {"A10-4Q": 6}}]}},
                        "gpuops_vgpu_default_config": "default"} if g == "vm_vgpu" else {}))}
                for g, hosts in groups.items()}},
            "cpu_nodes": {"hosts": cpu},
            "k8s_nodes": {"children": {"gpu_container": {}, "vm_vgpu": {}, "cpu_nodes": {}}},
        },
    }}
    with open(path, "w") as f:
        json.dump(inv, f, indent=1)
    return {t: sum(1 for i in range(n) if MIX[i % len(MIX)][0] == t) for t, _g in MIX}


def write_playbooks(d):
    books = {
        "startup": "- name: Startup only (no task)\n  hosts: all\n  gather_facts: false\n  tasks: []\n",
        "floor": ("- name: Ansible floor (one ping per host)\n  hosts: all\n  gather_facts: false\n  tasks:\n"
                  "    - name: Ping\n      ansible.builtin.ping:\n"),
        "preflight": PREFLIGHT_PLAY,
        "preflight+discovery": PREFLIGHT_PLAY + "\n" + DISCOVERY_IMPORT,
    }
    paths = {}
    for name, text in books.items():
        paths[name] = os.path.join(d, name.replace("+", "_") + ".yml")
        with open(paths[name], "w") as f:
            f.write("---\n" + text)
    paths["discovery"] = os.path.join(BOOKS, "discovery.yml")
    return paths


def check_site_head():
    """The preflight play and the discovery import here must be site.yml's; stop if site.yml changed."""
    with open(os.path.join(BOOKS, "site.yml")) as f:
        site = f.read()
    if PREFLIGHT_PLAY not in site or "ansible.builtin.import_playbook: discovery.yml" not in site:
        sys.exit("installed site.yml no longer starts with the preflight play run.py copies: update run.py")


TASK_LINE = re.compile(r"^(.*?) -*\s*(\d+\.\d\d)s$")
RECAP_LINE = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)"
                        r"\s+skipped=(\d+)\s+rescued=(\d+)\s+ignored=(\d+)")


def parse(stdout):
    """profile_tasks' summary {task: seconds} and the recap totals."""
    tasks, totals = {}, {"hosts": 0, "ok": 0, "failed": 0, "unreachable": 0, "ignored": 0}
    recap, summary = False, False
    for line in stdout.splitlines():
        if line.startswith("PLAY RECAP"):
            recap = True
            continue
        if line.startswith("TASKS RECAP"):
            recap = False
            continue
        if recap:
            m = RECAP_LINE.match(line)
            if m:
                totals["hosts"] += 1
                for k, i in (("ok", 2), ("unreachable", 4), ("failed", 5), ("ignored", 8)):
                    totals[k] += int(m.group(i))
        if line.startswith("====="):
            summary = True
            continue
        if summary:
            m = TASK_LINE.match(line.rstrip())
            if m:
                tasks[m.group(1).strip()] = tasks.get(m.group(1).strip(), 0.0) + float(m.group(2))
    return tasks, totals


def snapshot_collection():
    src = os.path.join(INSTALLED, "ansible_collections", "gpuops", "nvidia")
    if not os.path.isfile(os.path.join(src, "MANIFEST.json")):
        sys.exit("no installed collection under %s: run `make install`" % INSTALLED)
    dst = os.path.join(COLLECTIONS, "ansible_collections", "gpuops", "nvidia")
    shutil.rmtree(COLLECTIONS, ignore_errors=True)
    shutil.copytree(src, dst)
    with open(os.path.join(dst, "MANIFEST.json")) as f:
        info = json.load(f)["collection_info"]
    return "%s.%s %s (installed %s)" % (info["namespace"], info["name"], info["version"], time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime(os.path.getmtime(os.path.join(src, "MANIFEST.json")))))


def run_stage(name, book, inv, forks, logdir, rnd):
    """One ansible-playbook run.  A stage named X@pipelining is X with ANSIBLE_PIPELINING=True."""
    env = dict(os.environ,
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=COLLECTIONS,
               ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks",
               PROFILE_TASKS_TASK_OUTPUT_LIMIT="all",
               ANSIBLE_FORKS=str(forks),
               ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=os.path.join(CACHE, "ansible-tmp"),
               ANSIBLE_RETRY_FILES_ENABLED="0",
               COLUMNS="160",
               PYTHONDONTWRITEBYTECODE="1")
    if name.endswith("@pipelining"):
        # ansible.cfg sets pipelining under [ssh_connection] only, so the local connection does not pipeline
        env["ANSIBLE_PIPELINING"] = "True"
    cmd = [PLAYBOOK, "-i", inv, book, "-e", "gpuops_k8s_api=false", "-e", "gpuops_empty_stage=fail"]
    load = os.getloadavg()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(cmd, env=env, cwd=CACHE, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU of ansible-playbook and every process it waited for (workers, module interpreters)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    log = os.path.join(logdir, "%s-f%d-r%d.log" % (name.replace("+", "_"), forks, rnd))
    with open(log, "w") as f:
        f.write(res.stdout + "\n--- stderr\n" + res.stderr)
    tasks, totals = parse(res.stdout)
    if res.returncode != 0 or totals["failed"] or totals["unreachable"]:
        sys.exit("%s (forks %d) failed, rc %d: see %s\n%s" % (name, forks, res.returncode, log, res.stdout[-3000:]))
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 2), "load_before": [round(x, 2) for x in load], "tasks": tasks,
            "recap": totals, "log": log}


def module_logic_ms(trees, repeat=20):
    """gpu_facts' gather on each tree in this process: the module's own work, without Ansible around it."""
    sys.path.insert(0, COLLECTIONS)
    from ansible_collections.gpuops.nvidia.plugins.module_utils import _gpu_facts

    out = {}
    for tree in trees:
        root = os.path.join(ROOTS, tree)
        subset = ("pci", "iommu", "kernel", "driver")  # discovery's subset for a root other than "/"
        _gpu_facts.gather(root, subset)
        samples = []
        for _i in range(repeat):
            t0 = time.perf_counter()
            _gpu_facts.gather(root, subset)
            samples.append(time.perf_counter() - t0)
        out[tree] = round(statistics.median(samples) * 1e3, 3)
    return out


def summarise(runs):
    walls = [r["wall_s"] for r in runs]
    names = list(runs[0]["tasks"])
    tasks = {t: round(statistics.median([r["tasks"].get(t, 0.0) for r in runs]), 2) for t in names}
    return {"median_s": round(statistics.median(walls), 2), "min_s": round(min(walls), 2),
            "max_s": round(max(walls), 2), "n": len(walls),
            "cpu_median_s": round(statistics.median([r["cpu_s"] for r in runs]), 2),
            "tasks_median_s": dict(sorted(tasks.items(), key=lambda kv: -kv[1])),
            "tasks_total_s": round(sum(tasks.values()), 2),
            "outside_tasks_s": round(statistics.median(walls) - sum(tasks.values()), 2),
            "recap": runs[0]["recap"],
            "runs": [{"wall_s": r["wall_s"], "cpu_s": r["cpu_s"], "load_before": r["load_before"]} for r in runs]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hosts", type=int, default=200)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--forks", type=int, nargs="+", default=[20], help="forks values (ansible.cfg has 20)")
    p.add_argument("--stages", nargs="+", default=["startup", "floor", "discovery", "preflight", "preflight+discovery"],
                   help="any of startup floor discovery preflight preflight+discovery, each optionally @pipelining")
    p.add_argument("--pipelining", action="store_true",
                   help="also floor@pipelining and discovery@pipelining (ANSIBLE_PIPELINING=True)")
    p.add_argument("--out", help="results JSON")
    args = p.parse_args()

    if args.pipelining:
        args.stages += ["floor@pipelining", "discovery@pipelining"]
    os.makedirs(CACHE, exist_ok=True)
    collection = snapshot_collection()
    check_site_head()
    missing = sorted({t for t, _g in MIX if not os.path.isdir(os.path.join(ROOTS, t))})
    if missing:
        subprocess.run([sys.executable, os.path.join(REPO, "tests", "fixtures", "noderoots", "build.py"),
                        "--out", ROOTS, "--only"] + missing, check=True)
    os.makedirs(os.path.join(CACHE, "ansible-tmp"), exist_ok=True)
    logdir = os.path.join(CACHE, "logs")
    os.makedirs(logdir, exist_ok=True)
    inv = os.path.join(CACHE, "hosts-%d.yml" % args.hosts)
    trees = write_inventory(args.hosts, inv)
    books = write_playbooks(CACHE)

    started = datetime.datetime.now(datetime.timezone.utc)
    raw = {f: {s: [] for s in args.stages} for f in args.forks}
    for f in args.forks:
        for rnd in range(args.repeat):
            for s in args.stages:
                r = run_stage(s, books[s.split("@")[0]], inv, f, logdir, rnd)
                raw[f][s].append(r)
                print("forks %d round %d %-20s %7.2f s  cpu %7.2f s  load %s" % (
                    f, rnd, s, r["wall_s"], r["cpu_s"], r["load_before"]),
                      flush=True)

    result = {
        "command": " ".join([os.path.relpath(os.path.abspath(sys.argv[0]), REPO)] + sys.argv[1:]),
        "date": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "duration_s": round((datetime.datetime.now(datetime.timezone.utc) - started).total_seconds()),
        "machine": {"nproc": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "ansible_core": subprocess.run([PLAYBOOK, "--version"], capture_output=True, text=True,
                                                   check=False).stdout.splitlines()[0]},
        "collection": collection,
        "hosts": args.hosts,
        "trees": trees,
        "repeat": args.repeat,
        "callback": "ansible.posix.profile_tasks (every run); stdout_callback default (ansible.cfg)",
        "gpu_facts_logic_ms": module_logic_ms(sorted(trees)),
        "forks": {},
    }
    for f in args.forks:
        stages = {s: summarise(runs) for s, runs in raw[f].items()}
        floor = stages.get("floor", {}).get("median_s")
        for st in stages.values():
            if floor:
                st["ratio_to_floor"] = round(st["median_s"] / floor, 2)
        result["forks"][str(f)] = stages

    for f, stages in result["forks"].items():
        print("\nforks %s (%d hosts, median of %d)" % (f, args.hosts, args.repeat))
        for s, st in stages.items():
            top = ", ".join("%s %.1fs" % (t.split(" : ")[-1], v) for t, v in list(st["tasks_median_s"].items())[:3])
            print("  %-20s %7.2f s (min %.2f max %.2f)  x%s floor   %s" % (
                s, st["median_s"], st["min_s"], st["max_s"], st.get("ratio_to_floor"), top))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)
            fh.write("\n")


if __name__ == "__main__":
    main()
