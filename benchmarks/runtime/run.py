#!/usr/bin/env python3
# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""Runtime benchmark: container_runtime cost per config, beside `nvidia-ctk runtime configure --dry-run`.

    make bench-runtime        # or: .venv/bin/python benchmarks/runtime/run.py --nvidia-ctk PATH --containerd2 PATH

Per config it measures
  transform_ms   the pure edit (module_utils, in process; median of 50),
  module_s       a real `ansible localhost -m gpuops.nvidia.container_runtime` run that changes the file
                 (includes `containerd config dump` validation; restart_mode none; median of 3),
  noop_s         the same run again (nothing to change; median of 3),
  nvidia_ctk_s   `nvidia-ctk runtime configure --dry-run` on the same file (median of 5),
and whether the NVIDIA runtime entry nvidia-ctk would write equals ours (parity).
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
import tomllib

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIX = os.path.join(ROOT, "tests", "unit", "fixtures", "runtime")
sys.path.insert(0, os.path.join(ROOT, ".collections"))

from ansible_collections.gpuops.nvidia.plugins.module_utils._container_runtime import plan  # noqa: E402

CONFIGS = [
    # name, runtime, fixture, containerd binary key
    ("containerd-v2-default-1.6", "containerd", "containerd/v2-default-1.6.toml", "1.6"),
    ("containerd-v2-custom", "containerd", "containerd/v2-custom.toml", "1.6"),
    ("containerd-v3-custom", "containerd", "containerd/v3-custom.toml", "2.x"),
    ("containerd-v4-default-2.4", "containerd", "containerd/v4-default-2.4.toml", "2.x"),
    ("docker-daemon-json", "docker", "docker/daemon.json", None),
    ("crio-drop-in", "crio", None, None),
]


def read_fixture(rel):
    if rel is None:
        return ""
    with open(os.path.join(FIX, rel)) as f:
        return f.read()


def med(xs):
    return round(statistics.median(xs), 4)


def ansible_env(collections):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
               ANSIBLE_PYTHON_INTERPRETER="/usr/bin/python3", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    return env


def run_module(env, args):
    cmd = [os.path.join(ROOT, ".venv", "bin", "ansible"), "localhost", "-i", "localhost,", "-c", "local",
           "-m", "gpuops.nvidia.container_runtime", "-a", json.dumps(args)]
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t
    res = json.loads(proc.stdout[proc.stdout.find("{"):])["plays"][0]["tasks"][0]["hosts"]["localhost"]
    if res.get("failed"):
        raise SystemExit("module failed: %s" % res.get("msg"))
    return dt, res


def ctk_nvidia_entry(ctk, runtime, path):
    cmd = [ctk, "runtime", "configure", "--runtime=" + runtime, "--config=" + path, "--dry-run"]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    dt = time.perf_counter() - t
    out = "\n".join(line for line in (proc.stdout + "\n" + proc.stderr).splitlines() if not line.startswith("time="))
    entry = None
    try:
        if runtime == "docker":
            entry = json.loads(out[out.find("{"):])["runtimes"]["nvidia"]
        else:
            first = out.split("\n\n[", 1)
            text = out
            if runtime == "containerd":
                # the drop-in is printed first, then the top-level file
                text = out.split("imports = [", 1)[0]
            data = tomllib.loads(text)
            if runtime == "crio":
                entry = data["crio"]["runtime"]["runtimes"]["nvidia"]
            else:
                plugins = data["plugins"]
                cri = plugins.get("io.containerd.cri.v1.runtime") or plugins.get("io.containerd.grpc.v1.cri")
                entry = cri["containerd"]["runtimes"]["nvidia"]
            del first
    except Exception as e:  # keep the timing even when the output is not what we expect
        entry = {"_unparsed": str(e)}
    return dt, entry


def our_entry(runtime, text):
    if runtime == "docker":
        return json.loads(text)["runtimes"]["nvidia"]
    data = tomllib.loads(text)
    if runtime == "crio":
        return data["crio"]["runtime"]["runtimes"]["nvidia"]
    plugins = data["plugins"]
    cri = plugins.get("io.containerd.cri.v1.runtime") or plugins.get("io.containerd.grpc.v1.cri")
    return cri["containerd"]["runtimes"]["nvidia"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nvidia-ctk")
    ap.add_argument("--containerd2")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results-local.json"))
    a = ap.parse_args()
    binaries = {"1.6": shutil.which("containerd"), "2.x": a.containerd2 if a.containerd2 and os.path.exists(a.containerd2) else None}
    work = tempfile.mkdtemp(prefix="gpuops-bench-runtime-")
    collections = os.path.join(work, "collections")
    shutil.copytree(os.path.join(ROOT, ".collections"), collections)
    env = ansible_env(collections)
    rows = []
    for name, runtime, rel, ctd in CONFIGS:
        text = read_fixture(rel)
        ext = ".json" if runtime == "docker" else ".toml"
        p = {"runtime": runtime, "runtime_name": "nvidia", "runtime_path": "/usr/bin/nvidia-container-runtime",
             "set_as_default": False, "enable_cdi": True, "runtime_options": {}, "runtime_config": {},
             "config_path": os.path.join(work, name + ext)}
        ts = []
        for _ in range(50):
            t = time.perf_counter()
            changes, _info = plan(p, lambda _path, _text=text: _text)
            ts.append(time.perf_counter() - t)
        ours = changes[0][2]
        row = {"config": name, "bytes": len(text), "transform_ms": round(med(ts) * 1000, 3)}
        args = {"runtime": runtime, "config_path": p["config_path"], "restart_mode": "none", "enable_cdi": True}
        if ctd:
            args["binary_path"] = binaries[ctd]
            if not binaries[ctd]:
                args["validate"] = False
        mod, noop = [], []
        for _ in range(3):
            with open(p["config_path"], "w") as f:
                f.write(text)
            dt, res = run_module(env, args)
            assert res["changed"], res
            mod.append(dt)
            dt, res = run_module(env, args)
            assert not res["changed"], res
            noop.append(dt)
        row.update(module_s=med(mod), noop_s=med(noop), validated=res.get("validated", False) or bool(ctd and binaries[ctd]))
        if a.nvidia_ctk and os.path.exists(a.nvidia_ctk):
            ctk_t = []
            for _ in range(5):
                with open(p["config_path"], "w") as f:
                    f.write(text)
                dt, entry = ctk_nvidia_entry(a.nvidia_ctk, runtime, p["config_path"])
                ctk_t.append(dt)
            mine = our_entry(runtime, ours)
            row.update(nvidia_ctk_s=med(ctk_t), parity=(entry == mine))
            if entry != mine:
                row["nvidia_ctk_entry"], row["our_entry"] = entry, mine
        rows.append(row)
        print(json.dumps(row))
    result = {
        "command": "make bench-runtime",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(), "note": "shared 2-core VM, other builds running"},
        "containerd": {k: v for k, v in binaries.items()},
        "nvidia_ctk": a.nvidia_ctk,
        "rows": rows,
    }
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    shutil.rmtree(work, ignore_errors=True)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
