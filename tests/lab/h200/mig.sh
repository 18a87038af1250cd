#!/usr/bin/env bash
# MIG on the real H200, read-only: run ON the lent GPU machine from the repository root, with
# .gpu-bundle/wheels (make gpu-bundle) and .collections (make install) carried.  Plans several MIG
# layouts in check mode from the real GPU's NVML answers, checks refusals, and verifies the GPU's MIG
# mode (and compute mode) unchanged.  Results under $OUT (default ./mig-results).  Never changes the
# GPU: mig_check.yml refuses to run outside check mode, and the settings are compared before/after.
set -u
REPO=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$REPO"
RESULTS=${OUT:-$REPO/mig-results}
SITE=${MIG_LANE_SITE:-/tmp/gpuops-mig-site}
mkdir -p "$RESULTS" "$SITE"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .gpu-bundle/wheels/*.whl || exit 1
export PYTHONPATH=$SITE PATH=$SITE/bin:/usr/local/nvidia/bin:$PATH
export ANSIBLE_COLLECTIONS_PATH=$REPO/.collections ANSIBLE_CONFIG=$REPO/ansible.cfg ANSIBLE_NOCOLOR=1
export ANSIBLE_LOCALHOST_WARNING=false ANSIBLE_INVENTORY_UNPARSED_WARNING=false
Q=uuid,name,pci.bus_id,driver_version,mig.mode.current,mig.mode.pending,compute_mode,persistence_mode
nvidia-smi --query-gpu=$Q --format=csv,noheader >"$RESULTS/gpu-settings-before.csv"
t0=$(date +%s%3N)
timeout 300 python3 "$SITE/bin/ansible-playbook" -i localhost, -c local --check --diff \
    -e ansible_python_interpreter="$(command -v python3)" -e mig_check_dest="$RESULTS" \
    tests/lab/h200/mig_check.yml >"$RESULTS/mig-check.log" 2>&1
rc=$?
t1=$(date +%s%3N)
nvidia-smi --query-gpu=$Q --format=csv,noheader >"$RESULTS/gpu-settings-after.csv"
same=0; cmp -s "$RESULTS/gpu-settings-before.csv" "$RESULTS/gpu-settings-after.csv" || same=1
printf 'playbook_rc=%s settings_unchanged=%s wall_ms=%s\n' "$rc" "$([[ $same == 0 ]] && echo yes || echo NO)" $((t1 - t0)) | tee "$RESULTS/summary.txt"
tail -5 "$RESULTS/mig-check.log"
[[ $rc == 0 && $same == 0 ]]
