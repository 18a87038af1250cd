#!/usr/bin/env bash
# The cluster benchmark on a machine with more cores than the 2-core CI machine (the lent 16-core GPU
# machine: no network there, at most 64 MiB carried per call, 10 minutes a command). The control plane,
# KWOK and the Python side travel from here in two halves that each fit a call:
#
#   here:   benchmarks/cluster_deploy/device.sh pack        -> .devkit/a, .devkit/b (ignored), sizes checked
#   there:  benchmarks/cluster_deploy/device.sh stage       (call 1, carry .devkit/a: unpacks it into
#                                                            .devkit/cache, an ignored path the next calls keep)
#           benchmarks/cluster_deploy/device.sh run ARGS    (call 2.., carry .devkit/b: unpacks it, installs the
#                                                            wheels, runs run.py ARGS, results and logs to $OUT)
#
# Env: DEVKIT_PY (pack: the Python version the wheels are for, default 3.12 -- the lent machine's),
#      DEVKIT (default <repo>/.devkit), OUT (run: where results.json, run.log and logs.tar.gz go; default
#      .devkit/out), PYTHON3 (run: the interpreter, default python3), DEVKIT_BUDGET (run: seconds run.py may take,
#      default 540, so that it ends and the clusters are stopped inside a 10-minute call).
# Each call ends with every daemon it started stopped (run.py tears its clusters down; a trap runs down.sh).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
KIT=${DEVKIT:-$ROOT/.devkit}
CACHE=${GPUOPS_CACHE:-$HOME/.cache/gpuops}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
HALF_A=(kube-apiserver kube-controller-manager kubectl)
HALF_B=(kube-scheduler kwok etcd)

log() { printf '[devkit %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
source "$ROOT/tests/lab/device-kit.sh"

pack() {
    local py=${DEVKIT_PY:-3.12} bin=$CACHE/cluster/bin
    [[ -x $ROOT/.venv/bin/python ]] || die "no .venv here: run make venv first"
    "$ROOT/tests/lab/cluster/build.sh" etcd kube-apiserver kube-controller-manager kube-scheduler kwok kubectl
    rm -rf "$KIT/b/wheels"
    mkdir -p "$KIT/a" "$KIT/b/wheels"
    local b
    # compressed again only when the binary is newer (xz of all six: ~1.5 min on 2 cores)
    for b in "${HALF_A[@]}"; do [[ $KIT/a/$b.xz -nt $bin/$b ]] || { log "xz $b"; xz -T0 -6 -c "$bin/$b" >"$KIT/a/$b.xz"; }; done
    for b in "${HALF_B[@]}"; do [[ $KIT/b/$b.xz -nt $bin/$b ]] || { log "xz $b"; xz -T0 -6 -c "$bin/$b" >"$KIT/b/$b.xz"; }; done
    log "wheels for Python $py"
    # the wheels run.py and the playbook need: ansible-core and kubernetes with everything they require
    kit_wheels "$ROOT" "$KIT/b/wheels" "$py" ansible-core kubernetes
    # kubernetes.core (the roles' dependency) and ansible.posix (profile_tasks) as the venv's ansible package has them
    local ac
    ac=$("$ROOT/.venv/bin/python" -c 'import ansible_collections, os; print(os.path.dirname(list(ansible_collections.__path__)[0]))')
    tar -C "$ac" -cJf "$KIT/b/collections.tar.xz" ansible_collections/kubernetes/core ansible_collections/ansible/posix
    # KWOK's stage documents, which up.sh reads from the Go module cache
    local gomod=$CACHE/go/mod
    [[ -d $gomod/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage ]] || \
        (cd "$CACHE/cluster" && GOMODCACHE=$gomod GOTOOLCHAIN=local go mod download "sigs.k8s.io/kwok@$KWOK_VERSION")
    tar -C "$gomod" -cJf "$KIT/b/kwok-stage.tar.xz" "sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage"
    kit_check_parts "$ROOT" "$KIT" a b
}

stage() {
    local dest=$KIT/cache/cluster/bin b
    [[ -d $KIT/a ]] || die "$KIT/a missing: carry .devkit/a"
    mkdir -p "$dest"
    for b in "${HALF_A[@]}"; do kit_unxz "$KIT/a/$b.xz" >"$dest/$b"; chmod 755 "$dest/$b"; done
    log "staged ${HALF_A[*]} in $dest; $(nproc) cores"
    # what run needs besides the kit, said in this first call rather than after a second machine start
    for b in curl openssl; do command -v "$b" >/dev/null || log "ERROR: no $b here (up.sh needs it)"; done
}

run() {
    local dest py=${PYTHON3:-python3} out=${OUT:-$KIT/out} coll=$ROOT/.collections b
    RUN_CACHE=$KIT/cache
    dest=$RUN_CACHE/cluster/bin
    for b in "${HALF_A[@]}"; do
        [[ -x $dest/$b ]] || die "$dest/$b missing: the call that staged .devkit/a was on another machine (run stage again)"
    done
    [[ -d $KIT/b ]] || die "$KIT/b missing: carry .devkit/b"
    for b in curl openssl; do command -v "$b" >/dev/null || die "$b not found here (up.sh needs it)"; done
    for b in "${HALF_B[@]}"; do kit_unxz "$KIT/b/$b.xz" >"$dest/$b"; chmod 755 "$dest/$b"; done
    mkdir -p "$RUN_CACHE/go/mod" "$KIT/site" "$out"
    kit_unxz "$KIT/b/kwok-stage.tar.xz" | tar -C "$RUN_CACHE/go/mod" -x
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$KIT/site" "$KIT"/b/wheels/*.whl
    # the checkout there has neither .venv nor .collections (both ignored): a .venv of the carried wheels and
    # the collections where run.py and floor.py look for them (this checkout as gpuops.nvidia)
    if [[ ! -e $coll/ansible_collections/gpuops/nvidia ]]; then
        mkdir -p "$coll/ansible_collections/gpuops"
        ln -sfn "$ROOT" "$coll/ansible_collections/gpuops/nvidia"
    fi
    [[ -e $coll/ansible_collections/kubernetes/core ]] || kit_unxz "$KIT/b/collections.tar.xz" | tar -C "$coll" -x
    [[ -e $ROOT/.venv/pyvenv.cfg ]] && die "$ROOT/.venv is a real virtualenv: run this in a checkout of its own"
    mkdir -p "$ROOT/.venv/bin"
    printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v "$py")" >"$ROOT/.venv/bin/python"
    printf '#!/bin/sh\nexec %s -m ansible playbook "$@"\n' "$(command -v "$py")" >"$ROOT/.venv/bin/ansible-playbook"
    chmod 755 "$ROOT/.venv/bin/python" "$ROOT/.venv/bin/ansible-playbook"
    export PYTHONPATH=$KIT/site GPUOPS_CACHE=$RUN_CACHE ANSIBLE_COLLECTIONS_PATH=$coll \
        ANSIBLE_LOCAL_TEMP=$KIT/tmp ANSIBLE_HOME=$KIT/ansible-home
    trap 'GPUOPS_CACHE=$RUN_CACHE CLUSTER_DIR=$RUN_CACHE/cluster/bench "$ROOT/tests/lab/cluster/down.sh" --purge || true' EXIT
    # what the figures were taken on (the GPU's UUID too: each lease may be another machine; read only)
    { nproc; grep -m1 'model name' /proc/cpuinfo; free -g; nvidia-smi -L 2>/dev/null; } >"$out/machine.txt" 2>&1 || true
    log "$(nproc) cores; run.py $*"
    set +e
    # ended here, inside the call's 10 minutes, so that the trap stops the control plane: a call killed at its
    # limit would leave up.sh's daemons (own sessions) running until the machine goes back
    PYTHONUNBUFFERED=1 timeout "${DEVKIT_BUDGET:-540}" "$ROOT/.venv/bin/python" "$HERE/run.py" --out "$out/results.json" "$@" 2>&1 \
        | tee "$out/run.log"
    local rc=${PIPESTATUS[0]}
    set -e
    tar -C "$RUN_CACHE/cluster" -czf "$out/logs.tar.gz" bench-logs 2>/dev/null || true
    return "$rc"
}

case ${1:-} in
    pack) pack ;;
    stage) stage ;;
    run) shift; run "$@" ;;
    *) die "usage: $0 pack | stage | run RUN_PY_ARGS..." ;;
esac
