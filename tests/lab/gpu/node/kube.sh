# Sourced by tests/lab/gpu/run.sh: a standalone kubelet (static pods, cgroupfs, containerd CRI, no
# API server) and NVIDIA's device plugin, started and stopped by the lane (the machine has no systemd).
# Needs: LANE, RES, PY, STEP_TIMEOUT.

KUBELET_DIR=/var/lib/kubelet
MANIFESTS=/etc/kubernetes/manifests
NODE=h200
CHECKPOINT=$KUBELET_DIR/device-plugins/kubelet_internal_checkpoint

_start_bg() {  # _start_bg <name> cmd...: a daemon in its own session, pid in $LANE/run/<name>.pid
    local name=$1; shift
    setsid "$@" >>"$LANE/logs/$name.log" 2>&1 </dev/null &
    echo $! >"$LANE/run/$name.pid"
}
_stop_bg() {
    local f=$LANE/run/$1.pid pid
    [[ -f $f ]] || return 0
    pid=$(cat "$f")
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    rm -f "$f"
}

kubelet_start() {
    mkdir -p "$MANIFESTS" "$KUBELET_DIR"
    cat >"$LANE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: $MANIFESTS
fileCheckFrequency: 1s
syncFrequency: 5s
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
address: 127.0.0.1
readOnlyPort: 10255
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
resolvConf: ""
evictionHard: {}
localStorageCapacityIsolation: false
${KUBELET_EXTRA_CONFIG:-}
EOF
    _start_bg kubelet /usr/local/bin/kubelet --config="$LANE/kubelet.yaml" --hostname-override=$NODE \
        --root-dir=$KUBELET_DIR --v=2
    for _ in $(seq 1 300); do
        [[ -S $KUBELET_DIR/device-plugins/kubelet.sock ]] && return 0
        kill -0 "$(cat "$LANE/run/kubelet.pid")" 2>/dev/null || { echo "kubelet exited"; grep -E '^E' "$LANE/logs/kubelet.log" | tail -5; return 1; }
        sleep 0.2
    done
    echo "kubelet: no device-plugins/kubelet.sock after 60 s"; tail -30 "$LANE/logs/kubelet.log"; return 1
}

dp_start() {  # dp_start <config name>: NVIDIA's device plugin with the config the device_plugin role rendered
    _start_bg "device-plugin-$1" "$LANE/bin/nvidia-device-plugin" --config-file="$LANE/dp/$1.yaml"
    echo "$1" >"$LANE/run/dp-config"
}
dp_stop() {
    local c; c=$(cat "$LANE/run/dp-config" 2>/dev/null) || return 0
    _stop_bg "device-plugin-$c"; rm -f "$LANE/run/dp-config"
}

kubelet_view() {  # kubelet's registered devices per resource (its device manager checkpoint)
    "$PY" - "$CHECKPOINT" <<'EOF'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    print(json.dumps({"error": str(e)})); sys.exit(0)
reg = (d.get("Data") or {}).get("RegisteredDevices") or {}
print(json.dumps({"registered": {k: len(v) for k, v in reg.items()}, "devices": reg}, sort_keys=True))
EOF
}

wait_capacity() {  # wait_capacity <n>: kubelet has n nvidia.com/gpu devices registered
    local want=$1
    for _ in $(seq 1 $((STEP_TIMEOUT * 2))); do
        [[ "$(kubelet_view | "$PY" -c 'import json,sys; print(json.load(sys.stdin).get("registered", {}).get("nvidia.com/gpu", 0))')" == "$want" ]] && return 0
        sleep 0.5
    done
    echo "kubelet never registered $want nvidia.com/gpu"; tail -20 "$LANE"/logs/device-plugin-*.log; return 1
}

pod_make() {  # pod_make <name> <sleep seconds>: a static pod asking for one nvidia.com/gpu
    cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: default
spec:
  hostNetwork: true
  restartPolicy: Never
  containers:
    - name: cuda
      image: gpuops.local/node-check:lane
      imagePullPolicy: Never
      command:
        - /bin/sh
        - -c
        - >-
          python3 -c 'import time; print("START %.3f" % time.time())';
          nvidia-smi -L;
          python3 /check/_cuda.py --elements 1000000;
          sleep $2;
          python3 -c 'import time; print("END %.3f" % time.time())';
          echo DONE
      resources:
        limits:
          nvidia.com/gpu: 1
EOF
}

kubelet_pods() {  # kubelet's own view of its pods (read-only port): phase, reasons, container states
    "$PY" - <<'EOF'
import json, urllib.request
try:
    d = json.load(urllib.request.urlopen("http://127.0.0.1:10255/pods", timeout=5))
except Exception as e:  # noqa: BLE001 - diagnostics only
    print(json.dumps({"error": str(e)})); raise SystemExit(0)
out = [{"name": p["metadata"]["name"], "phase": p.get("status", {}).get("phase"),
        "reason": p.get("status", {}).get("reason"), "message": p.get("status", {}).get("message"),
        "containers": p.get("status", {}).get("containerStatuses")} for p in d.get("items", [])]
print(json.dumps(out, indent=1))
EOF
}

pod_log() { cat /var/log/pods/default_"$1"-${NODE}_*/cuda/*.log 2>/dev/null | cut -d' ' -f4-; }

wait_pods_done() {  # wait_pods_done <pod>...: each pod's log says DONE
    local p done
    for _ in $(seq 1 $((STEP_TIMEOUT * 2))); do
        done=1
        for p in "$@"; do pod_log "$p" | grep -q '^DONE' || done=0; done
        [[ $done == 1 ]] && return 0
        sleep 0.5
    done
    echo "pods not done: $*"; tail -40 "$LANE/logs/kubelet.log" | grep -iE 'error|fail|admit|nvidia' ; return 1
}

wait_pods_gone() {  # no pod containers left running
    for _ in $(seq 1 120); do
        [[ -z "$(ctr -n k8s.io tasks ls -q 2>/dev/null)" ]] && return 0
        sleep 0.5
    done
    echo "containers still running: $(ctr -n k8s.io tasks ls 2>/dev/null | tr '\n' ' ')"; return 1
}

lane_stop_all() {
    rm -f "$MANIFESTS"/*.yaml
    [[ -f $LANE/run/kubelet.pid ]] && wait_pods_gone
    dp_stop
    _stop_bg kubelet
    local t
    for t in $(ctr -n k8s.io tasks ls -q 2>/dev/null); do ctr -n k8s.io tasks kill -s KILL "$t" 2>/dev/null; done
    sleep 0.5
    "$LANE/containerd.sh" stop
    pkill -KILL -f containerd-shim-runc-v2 2>/dev/null
    pkill -KILL -x pause 2>/dev/null
    # kubelet makes its root dir a (shared) bind mount of itself; pod volumes live below it
    grep -o " $KUBELET_DIR[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null
    return 0
}
