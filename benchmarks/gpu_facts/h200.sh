#!/usr/bin/env bash
# Run on the lent H200 node (device tool), from the repository root, with .whl and
# .collections carried.  Writes everything under $OUT.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site ANSIBLE_COLLECTIONS_PATH=$PWD/.collections ANSIBLE_CONFIG=$PWD/ansible.cfg
export GPUOPS_COLLECTIONS=$PWD/.collections ANSIBLE_LOCALHOST_WARNING=false ANSIBLE_INVENTORY_UNPARSED_WARNING=false
PY=$(command -v python3)
nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id --format=csv,noheader 
"$PY" -c 'import pynvml, sys; print("pynvml", pynvml.__file__)'
# 1. the module through Ansible, connection local, JSON result
TIMEFORMAT='ansible-playbook capture (gpu_facts through Ansible) wall: %R s'
for i in 1 2 3; do
  time "$PY" /tmp/site/bin/ansible-playbook -i localhost, -c local -e ansible_python_interpreter="$PY" \
    -e capture_dest="$OUT" tests/lab/h200/capture.yml >> "$OUT/logs.txt" 2>&1
done
# 2. site.yml (discovery + report) against the real node
"$PY" /tmp/site/bin/ansible-playbook -i localhost, -c local -e ansible_python_interpreter="$PY" \
  -e gpu_workload=container playbooks/site.yml > /tmp/site.log 2>&1; echo "site.yml rc=$?"
cat /tmp/site.log >> "$OUT/logs.txt"; tail -12 /tmp/site.log
# 3. benchmark: module logic beside nvidia-smi, same machine, same run
"$PY" benchmarks/gpu_facts/run.py --host --fixtures --repeat 30 --out "$OUT/bench.json"
