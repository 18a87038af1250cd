#!/usr/bin/env bash
# Measure the VM lane's fixed costs: base image (cached or not) and boot-to-SSH under TCG.
#   benchmarks/vm_lane/run.sh [--cold]   (--cold drops the cached image and rootfs first: minutes)
# Prints one JSON object; also records the host load, which dominates TCG timings.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
lane="$here/../../tests/lab/vm"
source "$lane/lib.sh"
if [ "${1:-}" = --cold ]; then rm -f "$VM_CACHE"/bookworm-*.img "$VM_CACHE"/rootfs-*.tar; fi
t0=$(date +%s.%N); "$lane/build-image.sh" >/dev/null; t1=$(date +%s.%N)
trap '"$lane/stop.sh" bench --purge >/dev/null 2>&1' EXIT
"$lane/start.sh" bench 2>/dev/null; ssh_s=$("$lane/wait-ssh.sh" bench 900)
printf '{"image_s": %.1f, "boot_to_ssh_s": %s, "loadavg": "%s", "cpus": %s, "accel": "tcg"}\n' \
  "$(echo "$t1 - $t0" | bc)" "$ssh_s" "$(cut -d' ' -f1-3 /proc/loadavg)" "$(nproc)"
