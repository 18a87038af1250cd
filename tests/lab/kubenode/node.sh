#!/usr/bin/env bash
# A real Kubernetes node joined to a lane's API server: containerd 2.x and kubelet (both built from Go
# modules by tests/lab/gpu/build.sh), the component images made from the binaries built there and
# imported under the names the roles render, started and stopped by this script (neither machine it
# runs on has systemd).  Used by the cluster lane (no GPU, beside the KWOK fleet) and the GPU-cluster
# lane (the lent GPU machine).
#
#   node.sh images    make the pause and component images (OCI archives) from $KN_BIN
#   node.sh start     containerd (private root, state and socket), the images imported, the service
#                     address of the API server, kubelet registered as $KN_NODE; waits until Ready
#   node.sh stop      kubelet, every pod container, containerd, the service address: nothing left
#   node.sh status    what runs
#   node.sh restart-containerd   containerd again with its config as it is now (the container_toolkit role's
#                     restart command after it registered the nvidia runtime); pods keep running
#
# Env: KN_DIR (state, logs; default $GPUOPS_CACHE/kubenode), KN_BIN (binaries; default
# $GPUOPS_CACHE/gpu/bin), KN_KUBECONFIG (the API server, as admin), KN_API (host:port the kubeconfig's
# server is reached at), KN_NODE (node name), KN_REGISTRY (the registry part of the roles' image names),
# KN_IMAGES ("role=version ..." the images to make: device_plugin (also GFD's: one image), nfd),
# KN_KUBELET_ROOT (default $KN_DIR/kubelet; the GPU lane uses /var/lib/kubelet, where NVIDIA's device plugin
# finds kubelet's socket), KN_CONTAINERD_EXTRA (TOML appended to containerd's config), KN_CLIENT_CA (the CA
# whose client certificates kubelet accepts: the lane's, so that the API server reaches it for logs), PYTHON.
#
# Two things the machines make us do, both outside what the roles render:
#  - pods use the host network: the GPU machine has no veth or bridge in its kernel, so no CNI plugin can
#    give a pod an interface; the lane's API server has a MutatingAdmissionPolicy (cluster-policy.yaml)
#    that sets hostNetwork on every pod it admits, and containerd gets a loopback-only CNI config so that
#    the runtime reports its network ready;
#  - the `kubernetes` Service's address (10.96.0.1:443, what in-cluster clients such as config-manager and
#    nfd-worker are told) is put on the loopback interface with a forwarder to the API server behind it:
#    the lanes run no kube-proxy.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
CACHE=${GPUOPS_CACHE:-$HOME/.cache/gpuops}
KN_DIR=${KN_DIR:-$CACHE/kubenode}
KN_BIN=${KN_BIN:-$CACHE/gpu/bin}
KN_NODE=${KN_NODE:-kubenode-0}
KN_REGISTRY=${KN_REGISTRY:-gpuops.lab}
KN_KUBELET_ROOT=${KN_KUBELET_ROOT:-$KN_DIR/kubelet}
KN_SERVICE_IP=${KN_SERVICE_IP:-10.96.0.1}
# the Node's address: on lo, kubelet listening there (kubelet refuses a loopback node IP and then reports no address
# at all, and the API server cannot reach it for logs or exec)
KN_NODE_IP=${KN_NODE_IP:-10.254.254.1}
KN_KUBELET_PORT=${KN_KUBELET_PORT:-10250}
PYTHON=${PYTHON:-python3}
SOCK=$KN_DIR/run/containerd.sock
CTR=("$KN_BIN/ctr" --address "$SOCK" -n k8s.io)
mkdir -p "$KN_DIR"/{run,logs,images,cni/net.d,cni/bin,containerd,pod-logs}

log() { printf '[kubenode %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
running() { [[ -f $KN_DIR/run/$1.pid ]] && kill -0 "$(cat "$KN_DIR/run/$1.pid")" 2>/dev/null; }
start_bg() {  # start_bg <name> cmd...: a daemon in its own session
    local name=$1; shift
    echo "--- start $(date -u +%FT%T.%NZ)" >>"$KN_DIR/logs/$name.log"
    setsid "$@" >>"$KN_DIR/logs/$name.log" 2>&1 </dev/null &
    echo $! >"$KN_DIR/run/$name.pid"
}
stop_bg() {
    local f=$KN_DIR/run/$1.pid pid
    [[ -f $f ]] || return 0
    pid=$(cat "$f")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$f"
}
ipcmd() { if command -v ip >/dev/null; then ip "$@"; else "$KN_BIN/busybox" ip "$@"; fi; }
# read whole, then match: `ip ... | grep -q` under pipefail fails when grep's early exit SIGPIPEs ip
has_address() { local a; a=$(ipcmd addr show dev lo) && [[ $a == *" $1/"* ]]; }

images() {
    local mk=$ROOT/tests/lab/gpu/node/mkimage.py spec role version
    "$PYTHON" "$mk" --name gpuops.local/pause:lane --busybox "$KN_BIN/busybox" --pause "$KN_BIN/pause" \
        --bin "$KN_BIN/pause" --out "$KN_DIR/images/pause.tar" >&2
    for spec in ${KN_IMAGES:-}; do
        role=${spec%%=*} version=${spec#*=}
        case $role in
        device_plugin)  # one image for the device plugin, GFD, config-manager (and MPS's control daemon where
            # it was built), as NVIDIA ships them
            local mps=()
            [[ ! -x $KN_BIN/mps-control-daemon ]] || mps=(--bin "$KN_BIN/mps-control-daemon")
            # NVIDIA's image asks the nvidia runtime for every GPU (ENV of its Dockerfile): GFD's pod names none
            "$PYTHON" "$mk" --name "$KN_REGISTRY/nvidia/k8s-device-plugin:$version" --busybox "$KN_BIN/busybox" \
                --env NVIDIA_VISIBLE_DEVICES=all --env NVIDIA_DISABLE_REQUIRE=true \
                --bin "$KN_BIN/nvidia-device-plugin" --bin "$KN_BIN/gpu-feature-discovery" \
                --bin "$KN_BIN/config-manager" "${mps[@]}" --out "$KN_DIR/images/$role.tar" >&2 ;;
        nfd)  # NFD's image runs as an unprivileged user (the role's pods say runAsNonRoot)
            "$PYTHON" "$mk" --name "$KN_REGISTRY/nfd/node-feature-discovery:$version" --busybox "$KN_BIN/busybox" \
                --bin "$KN_BIN/nfd-master" --bin "$KN_BIN/nfd-worker" --user 65534:65534 \
                --out "$KN_DIR/images/$role.tar" >&2 ;;
        *) log "no image recipe for $role"; return 1 ;;
        esac
    done
}

containerd_config() {
    cp "$KN_BIN/loopback" "$KN_DIR/cni/bin/loopback"
    cat >"$KN_DIR/cni/net.d/10-gpuops-lo.conflist" <<'EOF'
{"cniVersion": "1.0.0", "name": "gpuops-lane-loopback", "plugins": [{"type": "loopback"}]}
EOF
    cat >"$KN_DIR/containerd/config.toml" <<EOF
version = 3
root = "$KN_DIR/containerd/root"
state = "$KN_DIR/containerd/state"
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[plugins]
  [plugins."io.containerd.cri.v1.images"]
    [plugins."io.containerd.cri.v1.images".pinned_images]
      sandbox = "gpuops.local/pause:lane"
  [plugins."io.containerd.cri.v1.runtime"]
    # the GPU machine's root lacks CAP_SYS_RESOURCE: runc cannot lower a sandbox's oom_score_adj
    restrict_oom_score_adj = true
    [plugins."io.containerd.cri.v1.runtime".cni]
      bin_dirs = ["$KN_DIR/cni/bin"]
      conf_dir = "$KN_DIR/cni/net.d"
    [plugins."io.containerd.cri.v1.runtime".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
          BinaryName = "$KN_BIN/runc"
          SystemdCgroup = false
${KN_CONTAINERD_EXTRA:-}
EOF
}

containerd_start() {
    running containerd && return 0
    PATH=$KN_BIN:$PATH start_bg containerd "$KN_BIN/containerd" --config "$KN_DIR/containerd/config.toml"
    for _ in $(seq 1 150); do
        [[ -S $SOCK ]] && "${CTR[@]}" version >/dev/null 2>&1 && return 0
        running containerd || { tail -20 "$KN_DIR/logs/containerd.log" >&2; return 1; }
        sleep 0.1
    done
    log "containerd did not answer on $SOCK in 15 s"; return 1
}

service_address() {  # the kubernetes Service's address on lo, forwarded to the API server; the Node's address
    has_address "$KN_SERVICE_IP" || ipcmd addr add "$KN_SERVICE_IP/32" dev lo
    has_address "$KN_NODE_IP" || ipcmd addr add "$KN_NODE_IP/32" dev lo
    running svcproxy || start_bg svcproxy "$PYTHON" "$HERE/svcproxy.py" --listen "$KN_SERVICE_IP:443" --to "$KN_API"
}

kubelet_start() {
    running kubelet && return 0
    mkdir -p "$KN_KUBELET_ROOT"
    cat >"$KN_DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
# the lane machines' cgroups (v1 on the CI machine, a v2 subtree on the GPU machine) are not kubelet's to
# divide: no per-QoS hierarchy, no node-allocatable enforcement
cgroupsPerQOS: false
enforceNodeAllocatable: []
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$SOCK
address: $KN_NODE_IP
port: $KN_KUBELET_PORT
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  # the API server's client certificate (up.sh: the admin's), so that kubectl logs/exec reach this kubelet
  x509: {clientCAFile: "${KN_CLIENT_CA:-}"}
authorization: {mode: AlwaysAllow}
resolvConf: ""
evictionHard: {}
localStorageCapacityIsolation: false
podLogsDir: $KN_DIR/pod-logs
serializeImagePulls: false
syncFrequency: 5s
nodeStatusUpdateFrequency: 5s
EOF
    start_bg kubelet "$KN_BIN/kubelet" --config="$KN_DIR/kubelet.yaml" --kubeconfig="$KN_KUBECONFIG" \
        --hostname-override="$KN_NODE" --node-ip="$KN_NODE_IP" --root-dir="$KN_KUBELET_ROOT" \
        --cert-dir="$KN_DIR/kubelet-pki" --v=2
}

wait_ready() {
    local i
    for i in $(seq 1 240); do
        if "$PYTHON" "$HERE/nodeready.py" "$KN_KUBECONFIG" "$KN_NODE" >/dev/null 2>&1; then
            log "node $KN_NODE Ready after $((i / 2)) s"; return 0
        fi
        running kubelet || { log "kubelet exited"; grep -E '^E' "$KN_DIR/logs/kubelet.log" | tail -10 >&2; return 1; }
        sleep 0.5
    done
    log "node $KN_NODE not Ready in 120 s"; "$PYTHON" "$HERE/nodeready.py" "$KN_KUBECONFIG" "$KN_NODE" >&2 || true
    tail -30 "$KN_DIR/logs/kubelet.log" >&2; return 1
}

fresh_state() {  # a node that starts from nothing: no containers, pods or kubelet state of an earlier run
    running kubelet || running containerd && return 0
    if grep -q " $KN_DIR/" /proc/mounts; then log "mounts left under $KN_DIR (node.sh stop first)"; return 1; fi
    # kubelet's root only when it is the node's own (the GPU lane's /var/lib/kubelet is left as it is)
    [[ $KN_KUBELET_ROOT == "$KN_DIR"/* ]] && rm -rf "$KN_KUBELET_ROOT"
    rm -rf "$KN_DIR"/{containerd,pod-logs,kubelet-pki,logs}
    mkdir -p "$KN_DIR"/{logs,containerd,pod-logs}
}

start() {
    [[ -n ${KN_KUBECONFIG:-} && -n ${KN_API:-} ]] || { log "KN_KUBECONFIG and KN_API are required"; return 1; }
    fresh_state
    containerd_config
    containerd_start
    local t
    for t in "$KN_DIR"/images/*.tar; do
        "${CTR[@]}" images import "$t" >/dev/null 2>>"$KN_DIR/logs/ctr.log" ||
            { tail -5 "$KN_DIR/logs/ctr.log" >&2; log "import of $t failed"; return 1; }
    done
    log "images: $("${CTR[@]}" images ls -q | grep -v '^sha256:' | tr '\n' ' ')"
    service_address
    kubelet_start
    wait_ready
}

stop() {
    stop_bg kubelet
    local t
    for t in $("${CTR[@]}" tasks ls -q 2>/dev/null); do "${CTR[@]}" tasks kill -s KILL "$t" 2>/dev/null || true; done
    sleep 0.5
    stop_bg containerd
    # shims outlive containerd; each one of this node carries its socket path in its command line
    pkill -KILL -f "containerd-shim-runc-v2.*$KN_DIR" 2>/dev/null || true
    stop_bg svcproxy
    if has_address "$KN_SERVICE_IP"; then ipcmd addr del "$KN_SERVICE_IP/32" dev lo; fi
    if has_address "$KN_NODE_IP"; then ipcmd addr del "$KN_NODE_IP/32" dev lo; fi
    # kubelet makes its root dir a bind mount of itself; pod volumes live below it
    grep -o " $KN_KUBELET_ROOT[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
    grep -o " $KN_DIR/containerd[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
    return 0
}

status() {
    local n
    for n in containerd svcproxy kubelet; do
        if running "$n"; then echo "$n running (pid $(cat "$KN_DIR/run/$n.pid"))"; else echo "$n stopped"; fi
    done
}

restart_containerd() {
    stop_bg containerd
    containerd_start
}

case ${1:-} in
images) images ;;
restart-containerd) restart_containerd ;;
start) start ;;
stop) stop ;;
status) status ;;
*) echo "usage: $0 images|start|stop|status|restart-containerd" >&2; exit 2 ;;
esac
