#!/usr/bin/env python3
# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""A CDI container through CRI-O on the GPU machine (the GPU cluster lane's CRI-O step; docs/gpu-lane.md).

CRI-O v1.34 (built here from its Go module, carried in the kit's part c with pinns, crictl and Debian's
conmon with its libraries) runs beside the lane's containerd with every path of its own under --work
(tests/lab/runtime/criod.py), its cdi_spec_dirs the system ones where site.yml's container_toolkit role
(our cdi_spec module) wrote the spec, and pulls the lane's CUDA check image from a registry in this process
(tests/lab/runtime/ociregistry.py).  One container asks for --device through the CRI's CDI_devices field
and runs the CUDA check (nvidia-smi -L, then the collection's vectorAdd); a control container asks for
nothing and must see no GPU.  CRI-O is stopped whatever happens; nothing of it is left running.

  crio_cdi.py --crio-bin DIR --conmon PATH --runc PATH --image OCI.tar --work DIR --expect GPU-UUID \\
              [--cdi-dir /etc/cdi --cdi-dir /var/run/cdi] [--device nvidia.com/gpu=all]

Prints one JSON object: {"version": "...", "checks": [{"name", "ok", "detail"}, ...]}.  Stdlib only.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "runtime"))
from criod import Crio  # noqa: E402  pylint: disable=wrong-import-position
from ociregistry import Registry  # noqa: E402  pylint: disable=wrong-import-position

CHECK = "nvidia-smi -L; python3 /check/_cuda.py && echo CUDA-CHECK-OK"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--crio-bin", required=True, help="directory with crio, pinns and crictl")
    ap.add_argument("--conmon", required=True)
    ap.add_argument("--runc", required=True)
    ap.add_argument("--image", required=True, help="the CUDA check image (OCI layout tar from mkimage.py)")
    ap.add_argument("--work", required=True)
    ap.add_argument("--expect", required=True, help="what the GPU container must print (the GPU's UUID)")
    ap.add_argument("--cdi-dir", action="append", default=None)
    ap.add_argument("--device", default="nvidia.com/gpu=all")
    ap.add_argument("--command", default=CHECK)
    args = ap.parse_args(argv)
    checks = []

    def add(name, ok, detail):
        checks.append({"name": name, "ok": bool(ok), "detail": str(detail)[-1500:]})

    os.makedirs(args.work, exist_ok=True)
    reg = Registry({"gpuops/cuda-check:lab": args.image})
    addr = reg.start()
    image = addr + "/gpuops/cuda-check:lab"
    crio = Crio(args.crio_bin, os.path.join(args.work, "crio"), addr, image, pause_command="/pause",
                conmon=args.conmon, runc=args.runc, cdi_dirs=args.cdi_dir or ["/etc/cdi", "/var/run/cdi"],
                # the GPU machine has neither iptables nor nft, and the container maps no host port
                extra_args=["--disable-hostport-mapping"])
    version = subprocess.run([crio.binary, "--version"], capture_output=True, text=True, check=False).stdout.split("\n")[0]
    try:
        crio.start()
        crio.crictl("pull", image)
        pod, ctr = crio.run_pod("cdi-gpu", image, ["sh", "-c", args.command], cdi_devices=[args.device])
        st = crio.wait_exit(ctr, 180)
        out = crio.logs(ctr)
        crio.remove_pod(pod)
        add("crio-cdi-container", st.get("exitCode") == 0 and args.expect in out and "CUDA-CHECK-OK" in out,
            "%s: a container asking CRI-O for %s (CDI_devices; specs in %s) exited %s: %s"
            % (version, args.device, ", ".join(args.cdi_dir or ["/etc/cdi", "/var/run/cdi"]), st.get("exitCode"), out))
        pod, ctr = crio.run_pod("no-cdi", image, ["sh", "-c", "ls /dev/nvidia0 2>&1; nvidia-smi -L 2>&1; true"])
        crio.wait_exit(ctr, 60)
        out = crio.logs(ctr)
        crio.remove_pod(pod)
        add("crio-no-cdi-no-gpu", args.expect not in out and "/dev/nvidia0" in out and "No such file" in out,
            "a container asking for no device sees none: %s" % out)
    except Exception as e:  # pylint: disable=broad-except  (the lane records it as a failed check)
        add("crio-cdi-container", False, "%s: %r\n--- crio log:\n%s" % (version, e, crio.log_tail(30)))
    finally:
        crio.stop()
        reg.stop()
        left = crio.processes()
        add("crio-stopped", not left, "processes of CRI-O's directory after stop: %s" % left)
    json.dump({"version": version, "checks": checks}, sys.stdout)
    return 0 if all(c["ok"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
