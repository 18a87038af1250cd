#!/usr/bin/env bash
# Build (and cache) the real control plane for the cluster lane, from Go modules only:
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl  <- k8s.io/kubernetes
#   etcd                                                               <- go.etcd.io/etcd/server/v3
#   kwok (controller mode: fakes kubelets for Node objects)            <- sigs.k8s.io/kwok
#   helm                                                               <- helm.sh/helm/v3
#   kubevirt-crds (KubeVirt's KubeVirt and VirtualMachine CRDs, data) <- kubevirt.io/kubevirt
# Everything lands in $GPUOPS_CACHE/cluster/bin; GOCACHE/GOMODCACHE live under
# $GPUOPS_CACHE/go so a rerun is a no-op (binaries are keyed by version stamp).
#
# Usage: build.sh [name ...]     (default: all but kubectl; names: etcd kube-apiserver
#                                  kube-controller-manager kube-scheduler kubectl kwok helm
#                                  kubevirt-crds)
# Env:   K8S_VERSION ETCD_VERSION KWOK_VERSION HELM_VERSION KUBEVIRT_VERSION  GPUOPS_CACHE  NICE (default 10)
#        GO (default: go on PATH, else /usr/local/go/bin/go)
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.7.0}   # the etcd client/server that k8s v1.37 itself requires
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
HELM_VERSION=${HELM_VERSION:-v3.22.0}   # v3: the major kubernetes.core 6.x helm modules drive
KUBEVIRT_VERSION=${KUBEVIRT_VERSION:-v1.9.0}   # CRDs only (kubevirt_crds.py): the KubeVirt role's schema
HERE=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-$HERE/../../../.venv/bin/python}
NICE=${NICE:-10}

CACHE=${GPUOPS_CACHE:-$HOME/.cache/gpuops}
BIN=$CACHE/cluster/bin
WORK=$CACHE/cluster/gomod
STAMPS=$CACHE/cluster/stamps
TIMINGS=$CACHE/cluster/build-timings.tsv
mkdir -p "$BIN" "$WORK" "$STAMPS"
renice -n "$NICE" -p $$ >/dev/null 2>&1 || true   # shared box: the whole build runs niced

GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
export GOCACHE=$CACHE/go/build GOMODCACHE=$CACHE/go/mod
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0
export GOPROXY=${GOPROXY:-https://proxy.golang.org,direct}

log() { printf '[build %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# fresh <name> <stamp>: true when $BIN/<name> was built with this exact stamp
fresh() { [[ -x $BIN/$1 && -f $STAMPS/$1 && "$(cat "$STAMPS/$1")" == "$2" ]]; }

timed() {  # timed <name> <stamp> cmd...
    local name=$1 stamp=$2; shift 2
    if fresh "$name" "$stamp"; then log "$name: cached ($stamp)"; return 0; fi
    log "$name: building ($stamp)"
    local t0=$SECONDS
    "$@"
    local dt=$((SECONDS - t0))
    echo "$stamp" >"$STAMPS/$name"
    printf '%s\t%s\t%ss\t%s\n' "$(date -u +%FT%TZ)" "$name" "$dt" "$stamp" >>"$TIMINGS"
    log "$name: built in ${dt}s"
}

k8s_module() {
    # Generate go.mod: require k8s.io/kubernetes, replace every staging module it
    # requires at v0.0.0 with the published v0.<minor>.<patch>.
    local d=$WORK/kubernetes stage=v0.${K8S_VERSION#v1.}
    [[ -f $d/.ok && "$(cat "$d/.ok")" == "$K8S_VERSION" ]] && return 0
    rm -rf "$d"; mkdir -p "$d"
    cp "$HERE/gomod/kubernetes/tools.go" "$d/"
    local upstream
    upstream=$(curl -fsS "${GOPROXY%%,*}/k8s.io/kubernetes/@v/$K8S_VERSION.mod")
    {
        echo "module gpuops.local/cluster/kubernetes"
        echo; echo "go 1.26.0"; echo
        echo "require k8s.io/kubernetes $K8S_VERSION"; echo
        echo "replace ("
        # staging modules = those k8s.io/kubernetes requires at v0.0.0
        sed -nE 's#^\s+(k8s\.io/[a-z0-9-]+) v0\.0\.0( //.*)?$#\1#p' <<<"$upstream" | sort -u |
            while read -r m; do echo "	$m => $m $stage"; done
        echo ")"
    } >"$d/go.mod"
    (cd "$d" && "$GO" mod tidy)
    echo "$K8S_VERSION" >"$d/.ok"
}

k8s_go_build() {  # k8s_go_build <name> <package>: built in the kubernetes module, versioned as a release is
    local name=$1 pkg=$2 stage=${K8S_VERSION#v}
    local major=${stage%%.*} rest=${stage#*.}; local minor=${rest%%.*}
    local ld="-s -w"
    for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$minor"
        ld+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
    done
    (cd "$WORK/kubernetes" && "$GO" build -trimpath -ldflags "$ld" -o "$BIN/$name.tmp" "$pkg" && mv "$BIN/$name.tmp" "$BIN/$name")
}

build_k8s() {  # build_k8s <cmd>
    k8s_go_build "$1" "k8s.io/kubernetes/cmd/$1"
}

build_kube() {  # the five Kubernetes commands as one binary (gomod/kube/main.go): what the GPU cluster lane carries
    rm -rf "$WORK/kubernetes/kube" && mkdir -p "$WORK/kubernetes/kube" && cp "$HERE/gomod/kube/main.go" "$WORK/kubernetes/kube/"
    k8s_go_build kube ./kube
}

build_etcd() {
    local d=$WORK/etcd
    if ! [[ -f $d/.ok && "$(cat "$d/.ok")" == "$ETCD_VERSION" ]]; then
        rm -rf "$d"; mkdir -p "$d"
        cp "$HERE/gomod/etcd/main.go" "$d/"
        printf 'module gpuops.local/cluster/etcd\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" >"$d/go.mod"
        (cd "$d" && "$GO" mod tidy)
        echo "$ETCD_VERSION" >"$d/.ok"
    fi
    (cd "$d" && "$GO" build -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" . && mv "$BIN/etcd.tmp" "$BIN/etcd")
}

build_install() {  # build_install <name> <pkg@version>  (modules without replace directives)
    GOBIN=$BIN "$GO" install -trimpath -ldflags "-s -w" "$2"
}

targets=("$@")
# kubectl is optional (debugging only; nothing in the lane needs it): build.sh kubectl
[[ ${#targets[@]} -gt 0 ]] || targets=(etcd kube-apiserver kwok kube-scheduler kube-controller-manager helm kubevirt-crds)

log "go=$("$GO" version) cache=$CACHE cores=$(nproc)"
for t in "${targets[@]}"; do
    case $t in
    etcd) timed etcd "etcd-server-$ETCD_VERSION" build_etcd ;;
    kube-apiserver | kube-controller-manager | kube-scheduler | kubectl | kubelet)
        fresh "$t" "k8s-$K8S_VERSION" || k8s_module
        timed "$t" "k8s-$K8S_VERSION" build_k8s "$t" ;;
    kube)
        fresh kube "k8s-$K8S_VERSION-$(sha256sum "$HERE/gomod/kube/main.go" | cut -c1-12)" || k8s_module
        timed kube "k8s-$K8S_VERSION-$(sha256sum "$HERE/gomod/kube/main.go" | cut -c1-12)" build_kube ;;
    kwok) timed kwok "kwok-$KWOK_VERSION" build_install kwok "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" ;;
    helm) timed helm "helm-$HELM_VERSION" build_install helm "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" ;;
    kubevirt-crds) "$PYTHON" "$HERE/kubevirt_crds.py" --version "$KUBEVIRT_VERSION" ;;  # own cache check, ~3 s cold
    *) echo "unknown binary: $t" >&2; exit 2 ;;
    esac
done
log "done: $(ls "$BIN" | tr '\n' ' ')"
