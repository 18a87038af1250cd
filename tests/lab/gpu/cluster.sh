#!/usr/bin/env bash
# The GPU cluster lane: the lent GPU machine as a one-node Kubernetes cluster -- the cluster lane's control
# plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler; tests/lab/cluster/up.sh, no KWOK), the
# kubelet node lane's containerd and kubelet (tests/lab/kubenode/node.sh) -- and playbooks/site.yml with
# gpuops_k8s_api: true doing the host stages and the cluster stage against it, unchanged but for the registry
# (tests/lab/gpu/cluster/vars.yml).  The checks are tests/lab/gpu/cluster/lane.py's; docs/gpu-lane.md says how
# to rerun it.  That machine takes 64 MiB per call and keeps a call's ignored files only while it stays warm
# (30 s), so the kit travels in parts, each a call, made back to back:
#
#   here:   tests/lab/gpu/cluster.sh pack      -> .gpu-cluster/{a,b,c} (ignored); each part's call checked
#                                                 against the 64 MiB limit with the working tree
#   there:  tests/lab/gpu/cluster.sh stage     (call 1, carry .gpu-cluster/a: the Kubernetes binaries and
#                                                 containerd, unpacked into .gpu-cluster/cache)
#           tests/lab/gpu/cluster.sh stage     (call 2, optional, carry .gpu-cluster/c: CRI-O, pinns, crictl and
#                                                 Debian's conmon with its libraries, for the CRI-O step)
#           tests/lab/gpu/cluster.sh run       (call 3, carry .gpu-cluster/b: NVIDIA's and NFD's binaries, runc,
#                                                 wheels, kubernetes.core, the toolkit archive; runs the lane;
#                                                 results to $OUT)
#
# Part a already staged on the warm machine is not staged again (its key is compared), so a failed run call
# is repeated alone.  Every daemon the run starts is stopped when it ends (a trap), and the GPU's settings
# are read before and after and compared: the lane never changes them.
# Env: GPUC_KIT (default <repo>/.gpu-cluster), OUT (run: checks.tsv, summary.json and results.tar.gz; default
# .gpu-cluster/out), GPUC_COMMIT (run: the collection commit the results name), GPUC_POD_WAIT (run: seconds
# the component pods get to run, default 90), GPUC_DIAGNOSE_ONLY=1 (run: a failing component is diagnosed and
# the run ends there, for a loan too short for the rest), GPUC_BUDGET
# (run: seconds lane.py may take, default 500), GPUC_SKIP (run: steps left out, comma-separated: timeslice,
# mps, validator, mig-manager, doctor, driver-upgrade, uninstall).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
KIT=${GPUC_KIT:-$ROOT/.gpu-cluster}
CACHE=${GPUOPS_CACHE:-$HOME/.cache/gpuops}
PART_A=(kube etcd containerd ctr containerd-shim-runc-v2)
PART_B=(nvidia-device-plugin gpu-feature-discovery config-manager mps-control-daemon nfd-master nfd-worker runc busybox pause loopback)
# part c: CRI-O (its step), NVIDIA's validator with its workload manifests (build.sh: GPU_OPERATOR_GIT) for the
# validator step, and NVIDIA's MIG manager with its nvidia-mig-parted (build.sh: MIG_PARTED_GIT) for the MIG
# manager step, each where it was built
PART_C=(crio crictl pinns nvidia-validator validator-manifests nvidia-mig-manager nvidia-mig-parted)
# part d: NVIDIA's DRA driver's GPU kubelet plugin and its image's files (build.sh: DRA_DRIVER_GIT), with Debian's
# bash-static (the image's prestart script runs under bash), for the DRA step; packed only where it was built
PART_D=(gpu-kubelet-plugin dra-driver-files)
K8S_LINKS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
CRIO_VERSION=${CRIO_VERSION:-v1.34.0}

log() { printf '[gpu-cluster %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
source "$ROOT/tests/lab/device-kit.sh"
where() {  # where <binary>: the cache folder it is built into
    case $1 in
        kube | etcd) echo "$CACHE/cluster/bin" ;;
        crio | crictl | pinns) echo "$CACHE/runtime/crio-$CRIO_VERSION/bin" ;;
        *) echo "$CACHE/gpu/bin" ;;
    esac
}

pack_part() {  # pack_part <a|b> <binary>...: one xz stream with a dictionary larger than the binaries together
    local part=$1; shift
    local t=$KIT/pack-$part b key
    rm -rf "$t"; mkdir -p "$t" "$KIT/$part"
    for b in "$@"; do
        # mps-control-daemon: built with the device plugin from a git directory only (DEVICE_PLUGIN_GIT)
        [[ $b != mps-control-daemon ]] ||
            [[ $(cat "$CACHE/gpu/stamps/$b" 2>/dev/null) == "$(cat "$CACHE/gpu/stamps/nvidia-device-plugin")" ]] || continue
        # nvidia-validator and its manifests, the MIG manager: built from a git directory only (GPU_OPERATOR_GIT,
        # MIG_PARTED_GIT)
        case $b in nvidia-validator | validator-manifests | nvidia-mig-* | gpu-kubelet-plugin | dra-driver-files)
            [[ -e $(where "$b")/$b ]] || continue ;;
        esac
        cp -r "$(where "$b")/$b" "$t/"
    done
    [[ $part != c ]] || conmon_bundle "$t"
    [[ $part != d ]] || cp /bin/bash-static "$t/bash"
    key=$(cd "$t" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
    if [[ $(cat "$KIT/$part/key" 2>/dev/null) != "$key" || ! -f $KIT/$part/bin.tar.xz ]]; then
        # the Go binaries of a part share most of their packages (client-go, go-nvml, grpc): ~5 min on one core
        log "xz part $part ($(du -sh "$t" | cut -f1))"
        tar -C "$t" --owner=0 --group=0 --sort=name -cf - . | xz -T1 -9e --lzma2=preset=9e,dict=512MiB >"$KIT/$part/bin.tar.xz.tmp"
        mv "$KIT/$part/bin.tar.xz.tmp" "$KIT/$part/bin.tar.xz"
        echo "$key" >"$KIT/$part/key"
    fi
    rm -rf "$t"
}

conmon_bundle() {  # conmon_bundle <dir>: CRI-O's Go binaries stripped, and Debian's conmon and dbus-daemon (the host
    # D-Bus system bus NVIDIA's MIG manager connects to) with their libraries and loader
    local t=$1
    strip "$t/crio" "$t/crictl"
    debian_bundle "$t" conmon /usr/bin/conmon
    debian_bundle "$t" dbus-daemon /usr/bin/dbus-daemon
}

debian_bundle() {  # debian_bundle <dir> <name> <binary>: <dir>/<name>/<name>, a wrapper starting Debian's binary through
    # the loader and libraries it runs with here (the GPU machine may have none of them)
    local t=$1 name=$2 bin=$3 lib
    mkdir -p "$t/$name/lib"
    cp "$bin" "$t/$name/$name.real"
    for lib in $(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}'); do
        cp -L "$lib" "$t/$name/lib/"
    done
    cat >"$t/$name/$name" <<EOS
#!/bin/sh
# Debian's $name with the libraries and loader it was built against (tests/lab/gpu/cluster.sh debian_bundle)
d=\$(dirname "\$(readlink -f "\$0")")
exec "\$d/lib/ld-linux-x86-64.so.2" --library-path "\$d/lib" "\$d/$name.real" "\$@"
EOS
    chmod 755 "$t/$name/$name"
}

pack() {
    [[ -x $ROOT/.venv/bin/python ]] || die "no .venv here: run make venv first"
    "$ROOT/tests/lab/cluster/build.sh" etcd kube
    bash "$HERE/build.sh"   # the GPU node bundle (.gpu-bundle): its binaries, toolkit archive and versions
    command -v dbus-daemon >/dev/null || apt-get install -y --no-install-recommends dbus-daemon   # part c's D-Bus
    make -C "$ROOT" runtime-apt runtime-crio CRIO_VERSION="$CRIO_VERSION"   # CRI-O, pinns, crictl; conmon
    pack_part a "${PART_A[@]}" &
    local pa=$!
    pack_part b "${PART_B[@]}"
    pack_part c "${PART_C[@]}"
    if [[ -x $CACHE/gpu/bin/gpu-kubelet-plugin ]]; then
        [[ -x /bin/bash-static ]] || apt-get install -y --no-install-recommends bash-static   # part d's bash
        pack_part d "${PART_D[@]}"
    fi
    wait "$pa"
    local c=$KIT/b
    rm -rf "$c/wheels"; mkdir -p "$c/wheels"
    cp "$ROOT"/.gpu-bundle/nvidia-container-toolkit_*.tar.xz "$ROOT/.gpu-bundle/SHA256SUMS" "$c/"
    # ansible-core, the kubernetes client (kubernetes.core and the lane's checks) and NVML's bindings, as locked
    kit_wheels "$ROOT" "$c/wheels" 3.12 ansible-core kubernetes nvidia-ml-py
    tar -C "$ROOT/.gpu-bundle" -cJf "$c/collections.tar.xz" collections
    {
        cat "$ROOT/.gpu-bundle/versions.txt"
        echo "nfd=$(python3 "$ROOT/docs/render_data.py" --get components.nfd)"
        # how the device plugin's binaries were built (build.sh's stamp: version@commit, +patches' hash)
        echo "k8s-device-plugin-build=$(cat "$CACHE/gpu/stamps/mps-control-daemon" 2>/dev/null || echo none)"
        echo "gpu-operator-validator=$(cat "$CACHE/gpu/stamps/nvidia-validator" 2>/dev/null || echo none)"
        echo "mig-parted=$(cat "$CACHE/gpu/stamps/nvidia-mig-manager" 2>/dev/null || echo none)"
        echo "dra-driver=$(cat "$CACHE/gpu/stamps/gpu-kubelet-plugin" 2>/dev/null || echo none)"
        echo "kubernetes=$(sed -n 's/^K8S_VERSION=\${K8S_VERSION:-\(.*\)}$/\1/p' "$ROOT/tests/lab/cluster/build.sh")"
        echo "etcd=$(sed -n 's/^ETCD_VERSION=\${ETCD_VERSION:-\([^}]*\)}.*/\1/p' "$ROOT/tests/lab/cluster/build.sh")"
    } >"$c/versions.txt"
    kit_check_parts "$ROOT" "$KIT" a b c
    [[ ! -f $KIT/d/bin.tar.xz ]] || kit_check_parts "$ROOT" "$KIT" d
}

stage() {  # stage <a|b|c|d>: a part's binaries into .gpu-cluster/cache/bin (c: .gpu-cluster/cache/crio, d: cache/dra)
    local part=$1 dest=$KIT/cache/bin
    [[ $part != c ]] || dest=$KIT/cache/crio
    [[ $part != d ]] || dest=$KIT/cache/dra
    [[ -f $KIT/$part/bin.tar.xz ]] || die "$KIT/$part missing: carry .gpu-cluster/$part"
    mkdir -p "$dest"
    if [[ $(cat "$KIT/cache/$part.key" 2>/dev/null) == "$(cat "$KIT/$part/key")" ]]; then
        log "part $part staged already"; return 0
    fi
    kit_unxz "$KIT/$part/bin.tar.xz" | tar -C "$dest" -x
    cp "$KIT/$part/key" "$KIT/cache/$part.key"
    log "staged part $part in $dest: $(ls "$dest" | tr '\n' ' '); $(nproc) cores; $(nvidia-smi -L 2>/dev/null | head -1)"
    log "curl: $(command -v curl || echo none); openssl: $(command -v openssl || echo none); python3: $(python3 -V 2>&1)"
}

run() {
    local bin=$KIT/cache/bin out=${OUT:-$KIT/out} c=$KIT/b b
    [[ -f $KIT/cache/a.key ]] || die "part a not staged on this machine (a new machine since the stage call: stage again)"
    [[ -f $c/versions.txt ]] || die "$c missing: carry .gpu-cluster/b"
    stage b
    mkdir -p "$out" "$KIT/site" "$KIT/cluster/bin" "$KIT/collections"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$KIT/site" "$c"/wheels/*.whl
    # the control plane's binaries where up.sh looks for them (GPUOPS_CACHE/cluster/bin): one binary, five names
    for b in "${K8S_LINKS[@]}"; do ln -sfn "$bin/kube" "$bin/$b"; ln -sfn "$bin/kube" "$KIT/cluster/bin/$b"; done
    ln -sfn "$bin/etcd" "$KIT/cluster/bin/etcd"
    [[ -e $KIT/collections/ansible_collections/kubernetes/core ]] ||
        kit_unxz "$c/collections.tar.xz" | tar -C "$KIT" -x
    mkdir -p "$KIT/collections/ansible_collections/gpuops"
    ln -sfn "$ROOT" "$KIT/collections/ansible_collections/gpuops/nvidia"
    export PYTHONPATH=$KIT/site PATH=$KIT/site/bin:$bin:$PATH GPUOPS_CACHE=$KIT PYTHON=python3 \
        ANSIBLE_COLLECTIONS_PATH=$KIT/collections ANSIBLE_CONFIG=$ROOT/ansible.cfg \
        ANSIBLE_LOCAL_TEMP=$KIT/tmp ANSIBLE_HOME=$KIT/ansible-home ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0 \
        CLUSTER_DIR=$KIT/cluster/run CLUSTER_KWOK=0 CLUSTER_PORT_BASE=${CLUSTER_PORT_BASE:-26443} \
        KN_DIR=$KIT/node KN_BIN=$bin KN_NODE=gpu-0 KN_KUBELET_ROOT=/var/lib/kubelet \
        GPUC_KIT=$KIT GPUC_ROOT=$ROOT
    GPUC_DRIVER_BRANCH=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 | cut -d. -f1)
    export GPUC_DRIVER_BRANCH
    if [[ -f $KIT/cache/c.key ]]; then export GPUC_CRIO_BIN=$KIT/cache/crio; else unset GPUC_CRIO_BIN; fi
    if [[ -f $KIT/cache/d.key ]]; then export GPUC_DRA_BIN=$KIT/cache/dra; else unset GPUC_DRA_BIN; fi
    if ! command -v curl >/dev/null; then  # up.sh asks the API server and etcd with curl
        mkdir -p "$KIT/shim"; ln -sfn "$HERE/cluster/curl.py" "$KIT/shim/curl"; chmod 755 "$HERE/cluster/curl.py"
        export PATH=$KIT/shim:$PATH; log "no curl here: tests/lab/gpu/cluster/curl.py in its place"
    fi
    command -v openssl >/dev/null || die "no openssl here (up.sh makes the cluster's certificates with it)"
    export KN_KUBECONFIG=$CLUSTER_DIR/kubeconfig KN_API=127.0.0.1:$CLUSTER_PORT_BASE KN_CLIENT_CA=$CLUSTER_DIR/pki/ca.crt
    stop_all() {
        bash "$ROOT/tests/lab/kubenode/node.sh" stop >/dev/null 2>&1 || true
        "$ROOT/tests/lab/cluster/down.sh" --purge >/dev/null 2>&1 || true
    }
    trap stop_all EXIT
    stop_all
    "$ROOT/tests/lab/cluster/up.sh" "$HERE/cluster/nodes.yml"
    # lane.py writes under .gpu-cluster/results; $OUT gets the checks, the summary and one archive of the rest
    # (the device tool brings back 8 files at most)
    rm -rf "$KIT/results"; mkdir -p "$KIT/results"
    export GPUC_RESULTS=$KIT/results
    set +e
    PYTHONUNBUFFERED=1 GPUC_BUDGET=${GPUC_BUDGET:-500} timeout "${GPUC_BUDGET:-500}" python3 "$HERE/cluster/lane.py" 2>&1 | tee "$KIT/results/lane.log"
    local rc=${PIPESTATUS[0]}
    set -e
    stop_all
    cp "$KIT/results/checks.tsv" "$KIT/results/summary.json" "$out/" 2>/dev/null || true
    tar -C "$KIT" -czf "$out/results.tar.gz" results cluster/run/logs node/logs node/pod-logs 2>/dev/null || true
    return "$rc"
}

case ${1:-} in
    pack) pack ;;
    # the parts carried by this call (a, c, d): each staged once per machine
    stage) n=0; for p in a c d; do [[ ! -f $KIT/$p/bin.tar.xz ]] || { stage "$p"; n=$((n + 1)); }; done
           ((n)) || die "nothing to stage: carry .gpu-cluster/a (and, for the CRI-O step, .gpu-cluster/c; DRA: d)" ;;
    run) run ;;
    *) die "usage: $0 pack | stage | run" ;;
esac
