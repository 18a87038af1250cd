#!/usr/bin/env bash
# Start a real control plane on 127.0.0.1 (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler) plus KWOK in controller mode, then create the simulated nodes of a spec.
#
# Usage: up.sh [NODES_SPEC]      (default: tests/lab/cluster/nodes/default.yml)
# Env:   GPUOPS_CACHE, CLUSTER_DIR (state: pki, etcd data, logs, kubeconfig;
#        default $GPUOPS_CACHE/cluster/run), CLUSTER_PORT_BASE (default 26443: apiserver;
#        +1 etcd client, +2 etcd peer, +3 kcm, +4 scheduler, +5 kwok), PYTHON,
#        CLUSTER_AUDIT (lane | 1 | 0: the API server's audit log, see below),
#        KWOK_PARALLELISM (KWOK's pod and node stage workers and lease renewers, default 16),
#        CLUSTER_KWOK (1 default; 0: no KWOK, for a cluster of real kubelets only -- the GPU cluster lane).
# Writes $CLUSTER_DIR/kubeconfig and $CLUSTER_DIR/inventory.yml (the spec as an Ansible
# inventory of the same nodes). Idempotent: a running healthy cluster is reused and only
# the node set is re-synced.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
CACHE=${GPUOPS_CACHE:-$HOME/.cache/gpuops}
BIN=$CACHE/cluster/bin
DIR=${CLUSTER_DIR:-$CACHE/cluster/run}
SPEC=${1:-${NODES:-$HERE/nodes/default.yml}}
BASE=${CLUSTER_PORT_BASE:-26443}
API=$BASE ETCD=$((BASE + 1)) PEER=$((BASE + 2)) KCM=$((BASE + 3)) SCHED=$((BASE + 4)) KWOKP=$((BASE + 5))
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
export GOMODCACHE=$CACHE/go/mod
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
KWOK_PARALLELISM=${KWOK_PARALLELISM:-16}

log() { printf '[cluster %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; log "logs kept in $DIR/logs"; tail -n 20 "$DIR"/logs/*.log >&2 || true; exit 1; }

CLUSTER_KWOK=${CLUSTER_KWOK:-1}
[[ $CLUSTER_KWOK == [01] ]] || { log "CLUSTER_KWOK must be 0 or 1, got '$CLUSTER_KWOK'"; exit 2; }
DAEMONS=(etcd kube-apiserver kube-controller-manager kube-scheduler)
((CLUSTER_KWOK)) && DAEMONS+=(kwok)
for b in "${DAEMONS[@]}"; do
    [[ -x $BIN/$b ]] || "$HERE/build.sh" "$b"
done
mkdir -p "$DIR"/{pki,logs,pids,etcd,kcm,sched}
KCFG=$DIR/kubeconfig

healthy() { curl -fsS --max-time 2 --cacert "$DIR/pki/ca.crt" --cert "$DIR/pki/admin.crt" --key "$DIR/pki/admin.key" \
    "https://127.0.0.1:$API/readyz" >/dev/null 2>&1; }
running() { [[ -f $DIR/pids/$1 ]] && kill -0 "$(cat "$DIR/pids/$1")" 2>/dev/null; }

pki() {
    [[ -f $DIR/pki/admin.crt ]] && return 0
    log "generating certificates in $DIR/pki"
    local p=$DIR/pki
    (
        cd "$p"
        openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -keyout ca.key -out ca.crt -subj "/CN=gpuops-lab-ca" 2>/dev/null
        cat >san.cnf <<EOF
[req]
distinguished_name=dn
[dn]
[ext]
subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
EOF
        openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver" 2>/dev/null
        openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
            -extfile san.cnf -extensions ext -out apiserver.crt 2>/dev/null
        printf '[ext]\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' >client.cnf
        openssl req -newkey rsa:2048 -nodes -keyout admin.key -out admin.csr -subj "/O=system:masters/CN=gpuops-admin" 2>/dev/null
        openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
            -extfile client.cnf -extensions ext -out admin.crt 2>/dev/null
        openssl genrsa -out sa.key 2048 2>/dev/null
        openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
        rm -f ./*.csr
    )
    cat >"$KCFG" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: gpuops-lab
  cluster:
    server: https://127.0.0.1:$API
    certificate-authority: $DIR/pki/ca.crt
users:
- name: gpuops-admin
  user:
    client-certificate: $DIR/pki/admin.crt
    client-key: $DIR/pki/admin.key
contexts:
- name: gpuops-lab
  context: {cluster: gpuops-lab, user: gpuops-admin}
current-context: gpuops-lab
EOF
}

start() {  # start <name> <cmd...>
    local name=$1; shift
    running "$name" && return 0
    log "starting $name"
    setsid "$@" >"$DIR/logs/$name.log" 2>&1 </dev/null &
    echo $! >"$DIR/pids/$name"
}

wait_for() {  # wait_for <what> <seconds> <cmd...>
    local what=$1 t=$2; shift 2
    for ((i = 0; i < t * 4; i++)); do "$@" && return 0; sleep 0.25; done
    die "$what not ready after ${t}s"
}

kwok_config() {
    [[ $KWOK_PARALLELISM =~ ^[1-9][0-9]{0,3}$ ]] || die "KWOK_PARALLELISM must be a whole number from 1 to 9999, got '$KWOK_PARALLELISM'"
    local src=$GOMODCACHE/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage
    [[ -d $src ]] || (cd "$CACHE/cluster" && GOTOOLCHAIN=local go mod download "sigs.k8s.io/kwok@$KWOK_VERSION")
    {
        # Workers that play pod and node stages (mark pods Running/Ready/Succeeded, nodes Ready) and renew
        # leases: KWOK's default is 4 of each, which marked ~40 pods a second Ready at 1,000 nodes -- the
        # rollout a benchmark waits for, not the control plane, was the bound. Every option left out keeps its
        # default (KWOK defaults a configuration document as it does the built-in one).
        printf -- '---\napiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\noptions:\n'
        printf '  podPlayStageParallelism: %d\n  nodePlayStageParallelism: %d\n  nodeLeaseParallelism: %d\n' \
            "$KWOK_PARALLELISM" "$KWOK_PARALLELISM" "$KWOK_PARALLELISM"
        for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
            pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
            echo "---"; sed '/^---$/d' "$src/$f"
        done
    } >"$DIR/kwok.yaml"
}

# Audit log ($DIR/logs/audit.log, JSON lines), by CLUSTER_AUDIT:
#   lane (default): what the driver-upgrade proofs read from the API server's own records -- Node
#     patches/updates (cordon, uncordon, labels, annotations; not nodes/status heartbeats) and pod
#     evictions with their request bodies, pod deletes at Metadata level; blocking mode, so a request's
#     event is on disk when the client has its answer
#   1: every request at Metadata level (batch mode), for the benchmark's request counts
#   0: off
AUDIT_ARGS=()
case ${CLUSTER_AUDIT:-lane} in
    1)
        printf 'apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n' >"$DIR/audit-policy.yaml"
        AUDIT_ARGS=(--audit-policy-file "$DIR/audit-policy.yaml" --audit-log-path "$DIR/logs/audit.log"
            --audit-log-format json --audit-log-mode batch --audit-log-maxsize 20000) ;;
    lane)
        cat >"$DIR/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Request
  verbs: [patch, update]
  resources: [{group: "", resources: [nodes]}]
- level: Request
  verbs: [create]
  resources: [{group: "", resources: [pods/eviction]}]
- level: Metadata
  verbs: [delete, deletecollection]
  resources: [{group: "", resources: [pods]}]
- level: None
EOF
        AUDIT_ARGS=(--audit-policy-file "$DIR/audit-policy.yaml" --audit-log-path "$DIR/logs/audit.log"
            --audit-log-format json --audit-log-mode blocking --audit-log-maxsize 500) ;;
    0) ;;
    *) die "CLUSTER_AUDIT must be lane, 1 or 0 (got ${CLUSTER_AUDIT})" ;;
esac

T0=$SECONDS
pki
if ! healthy; then
    start etcd "$BIN/etcd" --name gpuops-lab --data-dir "$DIR/etcd" \
        --listen-client-urls "http://127.0.0.1:$ETCD" --advertise-client-urls "http://127.0.0.1:$ETCD" \
        --listen-peer-urls "http://127.0.0.1:$PEER" --initial-advertise-peer-urls "http://127.0.0.1:$PEER" \
        --initial-cluster "gpuops-lab=http://127.0.0.1:$PEER" --unsafe-no-fsync --quota-backend-bytes 4294967296 \
        --listen-metrics-urls "" --log-level warn
    wait_for etcd 30 curl -fsS -o /dev/null --max-time 1 "http://127.0.0.1:$ETCD/health"
    start kube-apiserver "$BIN/kube-apiserver" \
        --etcd-servers "http://127.0.0.1:$ETCD" --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
        --endpoint-reconciler-type none \
        --secure-port "$API" --cert-dir "$DIR/pki" \
        --tls-cert-file "$DIR/pki/apiserver.crt" --tls-private-key-file "$DIR/pki/apiserver.key" \
        --client-ca-file "$DIR/pki/ca.crt" --authorization-mode RBAC --allow-privileged=true \
        --service-account-issuer https://kubernetes.default.svc.cluster.local \
        --service-account-key-file "$DIR/pki/sa.pub" --service-account-signing-key-file "$DIR/pki/sa.key" \
        --service-cluster-ip-range 10.96.0.0/16 --profiling=false \
        --kubelet-client-certificate "$DIR/pki/admin.crt" --kubelet-client-key "$DIR/pki/admin.key" \
        --max-requests-inflight 800 --max-mutating-requests-inflight 400 --v 1 "${AUDIT_ARGS[@]}" \
        --enable-admission-plugins ExtendedResourceToleration --kubelet-preferred-address-types InternalIP,Hostname
    # ExtendedResourceToleration, as clusters that taint their GPU nodes run it (node_labels taints them
    # nvidia.com/gpu:NoSchedule): a pod asking for nvidia.com/gpu gets the toleration of that key; the kubelet reached
    # at the Node's InternalIP first (as kubeadm sets it: the lanes' node names resolve nowhere)
    wait_for kube-apiserver 120 healthy
fi
start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig "$KCFG" \
    --authentication-kubeconfig "$KCFG" --authorization-kubeconfig "$KCFG" \
    --bind-address 127.0.0.1 --secure-port "$KCM" --cert-dir "$DIR/kcm" --leader-elect=false \
    --service-account-private-key-file "$DIR/pki/sa.key" --root-ca-file "$DIR/pki/ca.crt" \
    --use-service-account-credentials=false --kube-api-qps 500 --kube-api-burst 1000 \
    --concurrent-daemonset-syncs 10 --node-monitor-grace-period 300s --profiling=false --v 1
cat >"$DIR/scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: $KCFG, qps: 500, burst: 1000}
leaderElection: {leaderElect: false}
EOF
start kube-scheduler "$BIN/kube-scheduler" --config "$DIR/scheduler.yaml" \
    --authentication-kubeconfig "$KCFG" --authorization-kubeconfig "$KCFG" \
    --bind-address 127.0.0.1 --secure-port "$SCHED" --cert-dir "$DIR/sched" --v 1
# KWOK's node leases last 400 s (renewed at a quarter of that) and the node controller waits 300 s
# (--node-monitor-grace-period above) before calling a node NotReady: with 40 s leases a 5,000-node cluster
# needs 500 renewals a second, more than two loaded cores serve, and nodes dropped out of the DaemonSets
# mid-rollout (2026-12-04: 210 of 5,000 NotReady after 8 min).
if ((CLUSTER_KWOK)); then
    kwok_config
    start kwok "$BIN/kwok" --config "$DIR/kwok.yaml" --kubeconfig "$KCFG" \
        --manage-all-nodes=false --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
        --server-address "127.0.0.1:$KWOKP" --node-lease-duration-seconds 400 --cidr 10.244.0.1/16 --node-ip 10.0.0.1
fi
sleep 1
for c in "${DAEMONS[@]}"; do running "$c" || die "$c exited"; done
log "control plane up in $((SECONDS - T0))s (kubeconfig: $KCFG)"

# nodes: spec -> Node objects (created/updated/pruned) + inventory of the same nodes
"$PYTHON" "$HERE/nodes.py" sync --kubeconfig "$KCFG" --spec "$SPEC" --inventory "$DIR/inventory.yml" \
    || die "node sync failed"
log "ready in $((SECONDS - T0))s"
