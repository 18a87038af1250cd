"""Benchmark gpu_facts module logic against nvidia-smi on the same machine, same run.

Measures, for each root:
- ``all``: the full gather (sysfs + procfs + NVML when the host has it);
- ``pci,iommu``: the sysfs-only gather;
- ``process``: a fresh Python process doing the full gather (interpreter start included),
  which is what one Ansible module invocation pays on the target;
and, where ``nvidia-smi`` exists, ``nvidia-smi -q -x`` and ``nvidia-smi --query-gpu``.
Ratios are taken against ``nvidia-smi -q -x`` measured in the same run.

Usage: run.py --out results.json [--root NAME=PATH ...] [--host] [--repeat N]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))


def _collections_path():
    for cand in (os.environ.get("GPUOPS_COLLECTIONS"), os.path.join(REPO, ".collections")):
        if cand and os.path.isdir(os.path.join(cand, "ansible_collections", "gpuops", "nvidia")):
            return cand
    sys.exit("no installed collection: run `make install` (or set GPUOPS_COLLECTIONS)")


COLLECTIONS = _collections_path()
sys.path.insert(0, COLLECTIONS)
sys.path.insert(0, os.path.join(REPO, "tests", "fixtures", "noderoots"))

from ansible_collections.gpuops.nvidia.plugins.module_utils import _gpu_facts  # noqa: E402


def timeit(fn, repeat):
    fn()  # warm up (page cache, imports)
    samples = []
    for _i in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(samples), "min_s": min(samples), "max_s": max(samples), "n": repeat}


def bench_root(name, root, repeat, nvml_stub=None):
    out = {}
    # NVML only answers for the running host: a fixture root gets the capture's stand-in
    # (h200) or no NVML at all, so its figures are sysfs/procfs work alone
    if root == "/":
        load = _gpu_facts._nvml.load
    elif nvml_stub is not None:
        def load():
            return nvml_stub, None
    else:
        def load():
            return None, "fixture root: no NVML"
    out["all"] = timeit(lambda: _gpu_facts.gather(root, _gpu_facts.SUBSETS, load_nvml=load), repeat)
    out["pci,iommu"] = timeit(lambda: _gpu_facts.gather(root, ("pci", "iommu")), repeat)
    code = ("import sys; sys.path.insert(0, %r); "
            "from ansible_collections.gpuops.nvidia.plugins.module_utils import _gpu_facts as g; "
            "g.gather(%r, g.SUBSETS if %r == '/' else ('pci', 'iommu', 'kernel', 'driver'))" % (COLLECTIONS, root, root))
    out["process"] = timeit(lambda: subprocess.run([sys.executable, "-c", code], check=True), max(3, repeat // 5))
    facts, _warnings = _gpu_facts.gather(root, _gpu_facts.SUBSETS, load_nvml=load)
    out["gpus"] = facts.get("count")
    out["nvml"] = "nvml" in facts
    return out


def bench_smi(repeat):
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    return {
        "nvidia-smi -q -x": timeit(lambda: subprocess.run([smi, "-q", "-x"], check=True, stdout=subprocess.DEVNULL), repeat),
        "nvidia-smi --query-gpu": timeit(lambda: subprocess.run(
            [smi, "--query-gpu=index,name,uuid,memory.total,driver_version", "--format=csv"],
            check=True, stdout=subprocess.DEVNULL), repeat),
    }


def gpu_uuid():
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    r = subprocess.run([smi, "--query-gpu=name,uuid", "--format=csv,noheader"], capture_output=True, text=True, check=False)
    return r.stdout.strip() or None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--root", action="append", default=[], help="NAME=PATH of a node root tree")
    p.add_argument("--fixtures", action="store_true", help="also build and measure every lab node root")
    p.add_argument("--host", action="store_true", help="also measure the running host (root /)")
    p.add_argument("--repeat", type=int, default=30)
    args = p.parse_args()

    roots = dict(r.split("=", 1) for r in args.root)
    tmp = None
    stub = None
    if args.fixtures:
        import noderoots
        from nvml_standin import NVMLStandIn

        tmp = tempfile.mkdtemp(prefix="gpuops-bench-")
        roots.update(noderoots.build_all(tmp))
        stub = NVMLStandIn(os.path.join(REPO, "tests", "fixtures", "nodes", "h200-ubuntu2404-vm"))
    if args.host:
        roots["host"] = "/"

    result = {
        "command": " ".join([os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:]),
        "machine": {"node": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "kernel": platform.release(), "gpu": gpu_uuid()},
        "roots": {},
        "nvidia_smi": bench_smi(args.repeat),
    }
    for name, root in sorted(roots.items()):
        result["roots"][name] = bench_root(name, root, args.repeat, stub if name == "h200" else None)
    smi = (result["nvidia_smi"] or {}).get("nvidia-smi -q -x")
    if smi:
        for r in result["roots"].values():
            r["ratio_vs_smi_qx"] = {k: round(r[k]["median_s"] / smi["median_s"], 3) for k in ("all", "pci,iommu", "process")}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
    for name, r in sorted(result["roots"].items()):
        print("%-12s all %.2f ms  pci,iommu %.2f ms  process %.1f ms  %s" % (
            name, r["all"]["median_s"] * 1e3, r["pci,iommu"]["median_s"] * 1e3, r["process"]["median_s"] * 1e3,
            r.get("ratio_vs_smi_qx", "")))
    if smi:
        print("nvidia-smi -q -x %.1f ms" % (smi["median_s"] * 1e3))
    if tmp:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
