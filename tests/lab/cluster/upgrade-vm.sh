#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Rolling driver upgrade with a real node: the VM lane's guest (qemu, tests/lab/vm) registered as a
# KWOK-managed Node of a fresh lab control plane, upgraded by playbooks/driver_upgrade.yml over SSH
# with gpu_upgrade_reboot=always and the real gpuops.nvidia.reboot. Checks: the playbook succeeds,
# the guest's boot id changed (one real reboot), and, from the API server's audit log, the order
# cordon -> eviction of the node's pod -> driver step -> uncordon, label upgrade-done.
# Not in `make test-cluster` (a TCG boot plus a reboot take minutes).
#
# Env: DRIVER_IMAGE  a raw disk image with the NVIDIA driver installed: the guest boots it and the
#                    real gpuops.nvidia.driver role is the driver step (DRIVER_VARS: a vars file for
#                    it); without it the guest boots the VM lane's base image and the driver step is
#                    tests/lab/cluster/upgrade/driver.yml (writes /var/lib/gpuops-lab-driver-step).
#      VM_IMAGE      base image to boot without DRIVER_IMAGE (default: the VM lane's current one, else
#                    the newest bookworm-*.img in the VM cache)
#      GPUOPS_CACHE, CLUSTER_DIR (default $GPUOPS_CACHE/cluster/upgrade-vm), CLUSTER_PORT_BASE (26643),
#      GPUOPS_COLLECTIONS / ANSIBLE_COLLECTIONS_PATH (default .collections), KEEP=1 keeps VM and cluster.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
CACHE=${GPUOPS_CACHE:-$HOME/.cache/gpuops}
export GPUOPS_CACHE=$CACHE
export CLUSTER_DIR=${CLUSTER_DIR:-$CACHE/cluster/upgrade-vm}
export CLUSTER_PORT_BASE=${CLUSTER_PORT_BASE:-26643}
export CLUSTER_AUDIT=lane
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
COLL=${ANSIBLE_COLLECTIONS_PATH:-${GPUOPS_COLLECTIONS:-$ROOT/.collections}}
NAME=upgvm
NODE=upgvm
VM=$ROOT/tests/lab/vm
log() { printf '[upgrade-vm %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# the image: VM lane scripts boot $VM_CACHE/bookworm-<key of build-image.sh>.img; a private VM_CACHE
# whose entry links to the chosen image lets them boot another one unchanged
REAL_CACHE=${VM_CACHE:-$CACHE/vm}
base_image() { VM_CACHE=$1 bash -c 'source "$0/lib.sh" && echo "$VM_BASE_IMAGE"' "$VM"; }
if [[ -n ${DRIVER_IMAGE:-} ]]; then
    IMAGE=$DRIVER_IMAGE
elif [[ -n ${VM_IMAGE:-} ]]; then
    IMAGE=$VM_IMAGE
elif [[ -f $(base_image "$REAL_CACHE") ]]; then
    IMAGE=$(base_image "$REAL_CACHE")
else
    IMAGE=$(ls -t "$REAL_CACHE"/bookworm-*.img 2>/dev/null | head -1 || true)
fi
[[ -n $IMAGE && -f $IMAGE ]] || die "no VM image (set DRIVER_IMAGE or VM_IMAGE, or run tests/lab/vm/build-image.sh)"
[[ -f $REAL_CACHE/id_ed25519 ]] || die "no VM lane SSH key in $REAL_CACHE (run tests/lab/vm/build-image.sh)"
WORK=$(mktemp -d /tmp/gpuops-upgrade-vm.XXXXXX)
mkdir -p "$WORK/vmcache"
ln -s "$(realpath "$IMAGE")" "$(base_image "$WORK/vmcache")"
ln -s "$REAL_CACHE/id_ed25519" "$WORK/vmcache/id_ed25519"
ln -s "$REAL_CACHE/id_ed25519.pub" "$WORK/vmcache/id_ed25519.pub"
export VM_CACHE=$WORK/vmcache VM_STATE=$WORK/vmstate VM_RUN_ID=upgrade-vm-$$
log "image $IMAGE (driver step: $([[ -n ${DRIVER_IMAGE:-} ]] && echo 'gpuops.nvidia.driver' || echo 'lab stand-in'))"

cleanup() {
    local rc=$?
    if [[ ${KEEP:-0} != 1 ]]; then
        "$VM/stop.sh" "$NAME" >/dev/null 2>&1 || true
        if ((rc == 0)); then "$HERE/down.sh" --purge >/dev/null 2>&1 || true; rm -rf "$WORK"
        else "$HERE/down.sh" >/dev/null 2>&1 || true; log "FAILED (rc=$rc): cluster state $CLUSTER_DIR, VM state $WORK"; fi
    fi
    exit $rc
}
trap cleanup EXIT

T0=$SECONDS
echo "nodes: []" >"$WORK/nodes.yml"
"$HERE/down.sh" --purge >/dev/null 2>&1 || true
"$HERE/up.sh" "$WORK/nodes.yml"
"$VM/start.sh" "$NAME"
log "SSH after $("$VM/wait-ssh.sh" "$NAME" 600)s"
PORT=$(cat "$VM_STATE/$NAME/ssh.port")
SSH=(ssh -i "$VM_CACHE/id_ed25519" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR
     -o BatchMode=yes -p "$PORT" root@127.0.0.1)
BOOT_BEFORE=$("${SSH[@]}" cat /proc/sys/kernel/random/boot_id)

# the guest as a Node (KWOK keeps it Ready) with one pinned pod to evict
"$PYTHON" - "$CLUSTER_DIR/kubeconfig" "$NODE" <<'EOF'
import sys, time
from kubernetes import client, config
config.load_kube_config(sys.argv[1]); node = sys.argv[2]
core, apps = client.CoreV1Api(), client.AppsV1Api()
core.create_node({"metadata": {"name": node, "annotations": {"kwok.x-k8s.io/node": "fake"},
                               "labels": {"kubernetes.io/hostname": node, "type": "kwok"}},
                  "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                             "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"}}})
core.create_namespace({"metadata": {"name": "upgrade-vm"}})
apps.create_namespaced_deployment("upgrade-vm", {
    "metadata": {"name": "app"}, "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "app"}},
    "template": {"metadata": {"labels": {"app": "app"}}, "spec": {
        "nodeSelector": {"kubernetes.io/hostname": node}, "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "c", "image": "registry.lab.internal:5000/pause:3.10"}]}}}})
for _ in range(240):
    ps = core.list_namespaced_pod("upgrade-vm").items
    if ps and ps[0].status.phase == "Running":
        print(ps[0].metadata.name, file=open(sys.argv[1] + ".pod", "w")); break
    time.sleep(0.5)
else:
    sys.exit("the pinned pod never ran on " + node)
EOF

cat >"$WORK/inventory.yml" <<EOF
all:
  vars:
    gpuops_kubeconfig: $CLUSTER_DIR/kubeconfig
  children:
    k8s_gpu_nodes:
      hosts:
        $NAME:
          gpuops_k8s_node_name: $NODE
          ansible_host: 127.0.0.1
          ansible_port: $PORT
          ansible_user: root
          ansible_ssh_private_key_file: $VM_CACHE/id_ed25519
          ansible_ssh_common_args: -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR
          ansible_python_interpreter: /usr/bin/python3
    k8s_control:
      hosts:
        localhost: {ansible_connection: local, ansible_python_interpreter: $PYTHON}
EOF
EXTRA=(-e gpu_upgrade_reboot=always -e gpu_upgrade_become=false -e gpu_upgrade_drain_retry_delay=1
       -e "gpu_upgrade_validate_tasks=$HERE/upgrade/validate.yml" -e gpu_upgrade_test_run=vm-$$)
if [[ -n ${DRIVER_IMAGE:-} ]]; then
    [[ -n ${DRIVER_VARS:-} ]] && EXTRA+=(-e "@$DRIVER_VARS")
else
    EXTRA+=(-e "gpu_upgrade_driver_tasks=$HERE/upgrade/driver.yml")
fi
SINCE=$(date -u +%Y-%m-%dT%H:%M:%S.%6NZ)
T1=$SECONDS
ANSIBLE_COLLECTIONS_PATH=$COLL ANSIBLE_CONFIG=$ROOT/ansible.cfg ANSIBLE_NOCOLOR=1 \
    "$ROOT/.venv/bin/ansible-playbook" -i "$WORK/inventory.yml" "$ROOT/playbooks/driver_upgrade.yml" "${EXTRA[@]}"
log "playbook: $((SECONDS - T1))s"
BOOT_AFTER=$("${SSH[@]}" cat /proc/sys/kernel/random/boot_id)
[[ $BOOT_AFTER != "$BOOT_BEFORE" ]] || die "boot id unchanged ($BOOT_BEFORE): the guest did not reboot"
log "boot id $BOOT_BEFORE -> $BOOT_AFTER"
[[ -n ${DRIVER_IMAGE:-} ]] || "${SSH[@]}" test -f /var/lib/gpuops-lab-driver-step || die "driver step left no record in the guest"

"$PYTHON" - "$CLUSTER_DIR" "$NODE" "$SINCE" <<'EOF'
import json, sys, datetime as dt
d, node, since = sys.argv[1], sys.argv[2], dt.datetime.fromisoformat(sys.argv[3].replace("Z", "+00:00"))
pod = open(d + "/kubeconfig.pod").read().strip()
ev = []
for line in open(d + "/logs/audit.log"):
    e = json.loads(line)
    t = dt.datetime.fromisoformat(e["requestReceivedTimestamp"].replace("Z", "+00:00"))
    if e.get("stage") == "ResponseComplete" and t >= since and 200 <= e.get("responseStatus", {}).get("code", 0) < 300:
        ev.append((t, e))
ev.sort(key=lambda x: x[0])
def when(pred):
    return [t for t, e in ev if pred(e)]
ref = lambda e: e.get("objectRef") or {}
req = lambda e: e.get("requestObject") or {}
node_patch = lambda e: ref(e).get("resource") == "nodes" and ref(e).get("name") == node and not ref(e).get("subresource")
cordon = when(lambda e: node_patch(e) and req(e).get("spec", {}).get("unschedulable") is True)
uncordon = when(lambda e: node_patch(e) and "unschedulable" in req(e).get("spec", {}) and not req(e)["spec"]["unschedulable"])
evict = when(lambda e: ref(e).get("subresource") == "eviction" and ref(e).get("name") == pod)
driver = when(lambda e: node_patch(e) and "gpuops.lab/driver-step" in req(e).get("metadata", {}).get("annotations", {}))
done = when(lambda e: node_patch(e) and req(e).get("metadata", {}).get("labels", {}).get("nvidia.com/gpu-driver-upgrade-state") == "upgrade-done")
print("audit:", {k: [t.strftime("%H:%M:%S.%f") for t in v] for k, v in
                 dict(cordon=cordon, evict=evict, driver=driver, uncordon=uncordon, done=done).items()})
assert len(cordon) == 1 and len(uncordon) == 1 and evict and done, "missing events"
if driver:  # the lab stand-in records its step on the Node; the real driver role does not
    assert cordon[0] < evict[0] < driver[0] < uncordon[0] < done[0], "order"
else:
    assert cordon[0] < evict[0] < uncordon[0] < done[0], "order"
print("order cordon -> eviction -> driver step -> uncordon -> upgrade-done: ok")
EOF
log "PASSED in $((SECONDS - T0))s"
