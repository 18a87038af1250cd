#!/usr/bin/env bash
# Stop the cluster lane's processes (only those recorded in $CLUSTER_DIR/pids), in reverse
# start order: SIGTERM, wait, SIGKILL after 15 s. State and logs are kept unless --purge.
set -euo pipefail
CACHE=${GPUOPS_CACHE:-$HOME/.cache/gpuops}
DIR=${CLUSTER_DIR:-$CACHE/cluster/run}
purge=0; [[ ${1:-} == --purge ]] && purge=1
for c in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
    f=$DIR/pids/$c
    [[ -f $f ]] || continue
    pid=$(cat "$f")
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid"
        for ((i = 0; i < 60; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
        echo "[cluster] stopped $c ($pid)" >&2
    fi
    rm -f "$f"
done
if ((purge)); then rm -rf "$DIR"; echo "[cluster] purged $DIR" >&2; fi
