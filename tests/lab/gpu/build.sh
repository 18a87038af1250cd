#!/usr/bin/env bash
# Build (and cache) everything the GPU node lane carries to the lent H200, then pack the bundle.
#
#   containerd, ctr, containerd-shim-runc-v2  <- github.com/containerd/containerd/v2 (CGO off)
#   runc                                      <- Debian bookworm's runc (dynamically linked to
#                                                libseccomp2, which the GPU node has)
#   nvidia-ctk, nvidia-container-runtime,
#   nvidia-cdi-hook                           <- github.com/NVIDIA/nvidia-container-toolkit (cgo: NVML
#                                                through dlopen); packed as a release-shaped archive the
#                                                container_toolkit role installs from (the air-gapped path)
#   nvidia-device-plugin, gpu-feature-discovery,
#   config-manager, mps-control-daemon        <- github.com/NVIDIA/k8s-device-plugin: with DEVICE_PLUGIN_GIT
#                                                (a git directory holding NVIDIA's public repository: a
#                                                clone, or a fetched snapshot), the tag DEVICE_PLUGIN_VERSION
#                                                (default: the version the roles pin) checked against the
#                                                commit KNOWN_TAGS names, built offline from its vendor/
#                                                tree; without it, the newest version the Go module proxy
#                                                serves (v0.17.4), patched (patches/*.patch says why) -- the
#                                                kubelet node lanes run the built one and say which
#   nvidia-validator, validator-manifests/   <- github.com/NVIDIA/gpu-operator with GPU_OPERATOR_GIT (a git
#                                                directory of NVIDIA's repository), the validator role's pin
#                                                checked against KNOWN_OPERATOR_TAGS, offline from its vendor/
#                                                tree (the GPU cluster lane's validator image); else not built
#   nvidia-mig-manager, nvidia-mig-parted    <- github.com/NVIDIA/mig-parted with MIG_PARTED_GIT (a git directory of
#                                                NVIDIA's repository; the Go module proxy refuses the module), the
#                                                mig_manager role's pin checked against KNOWN_MIG_TAGS, offline from
#                                                its vendor/ tree (the GPU cluster lane's MIG manager image); else not
#                                                built
#   gpu-kubelet-plugin, dra-driver-files/     <- kubernetes-sigs/dra-driver-nvidia-gpu with DRA_DRIVER_GIT (a git directory
#                                                of the repository; the Go module proxy refuses the module): the commit
#                                                KNOWN_DRA_REFS names for DRA_DRIVER_REF, offline from its vendor/ tree,
#                                                and the image's prestart script and MPS templates (the GPU cluster
#                                                lane's DRA step); else not built
#   nfd-master, nfd-worker                    <- sigs.k8s.io/node-feature-discovery at the version the
#                                                nfd role pins (plugins/plugin_utils/_components.py)
#   loopback                                  <- github.com/containernetworking/plugins (the CNI config of
#                                                the kubelet node lanes: pods there use the host network)
#   kubelet                                   <- k8s.io/kubernetes, built by ../cluster/build.sh (same
#                                                version as the cluster lane)
#   pause                                     <- pause.c here, gcc -static
#   busybox                                   <- Debian's busybox-static
#   wheels                                    <- ansible-core and friends for the node's Python 3.12
#
# Binaries are cached under $GPUOPS_CACHE/gpu/bin keyed by version stamp; the bundle is written to
# $BUNDLE (default: <repo>/.gpu-bundle, git-ignored, carried to the GPU machine).  `build.sh bin` builds
# the binaries only (the cluster lane's kubelet node); one build of the binaries at a time (a lock under the
# cache, released before the bundle is packed), so the two test queues can ask for the same binaries at once.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
# the containerd 2.x of both lanes is named in plugins/module_utils/_containerd_releases.py only
CONTAINERD_VERSION=${CONTAINERD_VERSION:-$(python3 "$ROOT/docs/render_data.py" --get containerd.lane)}
NVIDIA_CTK_VERSION=${NVIDIA_CTK_VERSION:-v1.20.2}
DEVICE_PLUGIN_GIT=${DEVICE_PLUGIN_GIT:-}
if [[ -n $DEVICE_PLUGIN_GIT ]]; then
    DEVICE_PLUGIN_VERSION=${DEVICE_PLUGIN_VERSION:-$(python3 "$ROOT/docs/render_data.py" --get components.device_plugin)}
else
    DEVICE_PLUGIN_VERSION=${DEVICE_PLUGIN_VERSION:-v0.17.4}
fi
# NVIDIA's gpu-operator repository (a git directory): its nvidia-validator and the validator's workload manifests
# at the validator role's pin, for the GPU cluster lane's validator image; none: no validator there
GPU_OPERATOR_GIT=${GPU_OPERATOR_GIT:-}
GPU_OPERATOR_VERSION=${GPU_OPERATOR_VERSION:-$(python3 "$ROOT/docs/render_data.py" --get components.validator)}
# the commit each tag built from a git directory must resolve to (a tag is a name anyone can move)
declare -A KNOWN_TAGS=([v0.20.0]=1b826acc6af3079d8923bac395c3124b8861a9a6)
declare -A KNOWN_OPERATOR_TAGS=([v26.7.0]=10ee5b3638b89e11e949412aafa5ba99279c3721)
# NVIDIA's mig-parted repository (a git directory): nvidia-mig-manager and nvidia-mig-parted at the mig_manager role's
# pin, for the GPU cluster lane's MIG manager image; none: no MIG manager there
MIG_PARTED_GIT=${MIG_PARTED_GIT:-}
MIG_MANAGER_VERSION=${MIG_MANAGER_VERSION:-$(python3 "$ROOT/docs/render_data.py" --get components.mig_manager)}
declare -A KNOWN_MIG_TAGS=([v0.15.0]=e2d5ad1fc72b9d298ea6d04b885cf2d7dbe56941)
# NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu, a git directory): its GPU kubelet plugin. The dra_driver
# role pins v0.5.0 (GPU Operator v26.7.0); a snapshot without that tag builds the newest commit known here, whose
# VERSION file must name the ref (v0.5.0-dev: the main branch before the v0.5.0 release)
DRA_DRIVER_GIT=${DRA_DRIVER_GIT:-}
DRA_DRIVER_REF=${DRA_DRIVER_REF:-v0.5.0-dev}
declare -A KNOWN_DRA_REFS=([v0.5.0-dev]=95932046683719c43b6a0dd9613c2e5aad5d6703)
NFD_VERSION=${NFD_VERSION:-$(python3 "$ROOT/docs/render_data.py" --get components.nfd)}
CNI_PLUGINS_VERSION=${CNI_PLUGINS_VERSION:-v1.10.0}
K8S_VERSION=${K8S_VERSION:-v1.37.2}
ANSIBLE_CORE_VERSION=${ANSIBLE_CORE_VERSION:-$(sed -n 's/^ansible-core==//p' "$ROOT/requirements-dev.txt" | head -1)}
NICE=${NICE:-10}
CACHE=${GPUOPS_CACHE:-$HOME/.cache/gpuops}
BIN=$CACHE/gpu/bin
STAMPS=$CACHE/gpu/stamps
WORK=$CACHE/gpu/work
BUNDLE=${BUNDLE:-$ROOT/.gpu-bundle}
mkdir -p "$BIN" "$STAMPS" "$WORK"
exec 9>"$CACHE/gpu/.build.lock"
flock 9
renice -n "$NICE" -p $$ >/dev/null 2>&1 || true

GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
export GOCACHE=$CACHE/go/build GOMODCACHE=$CACHE/go/mod
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
export GOPROXY=${GOPROXY:-https://proxy.golang.org,direct}
# NVIDIA's modules are not in the checksum database we can reach
export GONOSUMDB=github.com/NVIDIA GONOSUMCHECK=1 GOPRIVATE=

log() { printf '[gpu-build %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
fresh() { [[ -x $BIN/$1 && -f $STAMPS/$1 && "$(cat "$STAMPS/$1")" == "$2" ]]; }
stamp() { echo "$2" >"$STAMPS/$1"; }

need_apt() {  # install Debian packages once (runc, busybox-static, xz, gcc static libc)
    local missing=()
    command -v runc >/dev/null || missing+=(runc)
    dpkg -s busybox-static >/dev/null 2>&1 || missing+=(busybox-static)
    command -v xz >/dev/null || missing+=(xz-utils)
    command -v patch >/dev/null || missing+=(patch)
    [[ -f /usr/lib/x86_64-linux-gnu/libc.a ]] || missing+=(libc6-dev)
    if ((${#missing[@]})); then
        log "apt: ${missing[*]}"
        apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}" >/dev/null
    fi
}

go_install() {  # go_install <cgo 0|1> <tags> <pkg@version> <name>...
    local cgo=$1 tags=$2 pkg=$3; shift 3
    (cd /tmp && GOBIN=$BIN CGO_ENABLED=$cgo nice -n "$NICE" "$GO" install -trimpath -ldflags "-s -w ${GO_LDFLAGS_EXTRA:-}" ${tags:+-tags "$tags"} "$pkg")
}

build_containerd() {
    local s="containerd-$CONTAINERD_VERSION" c
    for c in containerd ctr containerd-shim-runc-v2; do
        fresh "$c" "$s" && continue
        log "$c: building ($s)"
        go_install 0 "no_btrfs no_devmapper no_zfs" "github.com/containerd/containerd/v2/cmd/$c@$CONTAINERD_VERSION"
        stamp "$c" "$s"
    done
}

build_toolkit() {
    local s="nvidia-container-toolkit-$NVIDIA_CTK_VERSION+v" c
    for c in nvidia-ctk nvidia-container-runtime nvidia-cdi-hook; do
        fresh "$c" "$s" && continue
        log "$c: building ($s)"
        # the version string NVIDIA's release builds stamp in (else: "version unknown")
        GO_LDFLAGS_EXTRA="-X github.com/NVIDIA/nvidia-container-toolkit/internal/info.version=${NVIDIA_CTK_VERSION#v}" \
            go_install 1 "" "github.com/NVIDIA/nvidia-container-toolkit/cmd/$c@$NVIDIA_CTK_VERSION"
        stamp "$c" "$s"
    done
}

DP_CMDS=(nvidia-device-plugin gpu-feature-discovery config-manager)
dp_fresh() { local c; for c in "${DP_CMDS[@]}"; do fresh "$c" "$1" || return 1; done; }
# the kubelet node lanes build the device plugin v0.17.4 into bin/, the GPU cluster kit v0.20.0 (DEVICE_PLUGIN_GIT):
# each build is also kept under its stamp, and put back into bin/ instead of built again
dp_kept() { echo "$CACHE/gpu/dp/$(printf '%s' "$1" | tr -c 'A-Za-z0-9._+@-' _)"; }
dp_keep() {  # dp_keep <stamp>
    local d c; d=$(dp_kept "$1")
    rm -rf "$d.tmp"; mkdir -p "$d.tmp"
    for c in "${DP_CMDS[@]}"; do cp "$BIN/$c" "$d.tmp/"; done
    rm -rf "$d"; mv "$d.tmp" "$d"
}
dp_restore() {  # dp_restore <stamp>: 0 when a kept build of that stamp went back into bin/
    local d c; d=$(dp_kept "$1")
    for c in "${DP_CMDS[@]}"; do [[ -x $d/$c ]] || return 1; done
    for c in "${DP_CMDS[@]}"; do cp "$d/$c" "$BIN/$c.tmp" && mv "$BIN/$c.tmp" "$BIN/$c" && stamp "$c" "$1"; done
    log "k8s-device-plugin: $1 put back from $d"
}

build_device_plugin_git() {  # the pinned tag from a git directory of NVIDIA's repository, offline (vendor/)
    local v=$DEVICE_PLUGIN_VERSION commit want=${KNOWN_TAGS[$DEVICE_PLUGIN_VERSION]:-} c
    [[ -n $want ]] || { log "ERROR: no known commit for k8s-device-plugin $v (KNOWN_TAGS)"; exit 1; }
    commit=$(git --git-dir="$DEVICE_PLUGIN_GIT" rev-parse --verify -q "refs/tags/$v^{commit}") ||
        { log "ERROR: $DEVICE_PLUGIN_GIT has no tag $v"; exit 1; }
    [[ $commit == "$want" ]] || { log "ERROR: tag $v is $commit in $DEVICE_PLUGIN_GIT, not $want"; exit 1; }
    DP_CMDS+=(mps-control-daemon)
    # the lane's patches for this version (patches/*.patch says why), part of the stamp
    local patches=("$HERE"/patches/k8s-device-plugin-"$v"-*.patch)
    [[ -e ${patches[0]} ]] || patches=()
    local s="k8s-device-plugin-$v@$commit${patches:++$(cat "${patches[@]}" | sha256sum | cut -c1-12)}"
    dp_fresh "$s" || dp_restore "$s" && return 0
    log "k8s-device-plugin: building $v from $DEVICE_PLUGIN_GIT ($commit)"
    local src=$WORK/k8s-device-plugin-git
    rm -rf "$src"; mkdir -p "$src"
    # every top-level entry but tests/ (the e2e suite with a vendor tree of its own, not built; a fetched snapshot
    # may lack its largest files, and git archive reads the whole tree even when given paths): one archive each
    git_tree "$DEVICE_PLUGIN_GIT" "$commit" "$src" tests
    for p in "${patches[@]}"; do patch -s -p1 -d "$src" <"$p"; done
    (cd "$src" && for c in "${DP_CMDS[@]}"; do
        GOFLAGS="-mod=vendor -buildvcs=false" GOPROXY=off CGO_ENABLED=1 nice -n "$NICE" "$GO" build -trimpath \
            -ldflags "-s -w -X github.com/NVIDIA/k8s-device-plugin/internal/info.version=$v -X github.com/NVIDIA/k8s-device-plugin/internal/info.gitCommit=$commit" \
            -o "$BIN/$c" "./cmd/$c"
    done)
    for c in "${DP_CMDS[@]}"; do stamp "$c" "$s"; done
    dp_keep "$s"
}

git_tree() {  # git_tree <git dir> <commit> <dest> [skip...]: the commit's top-level entries, one archive each
    local git=$1 commit=$2 dest=$3 _mode type obj name; shift 3
    while read -r _mode type obj name; do
        [[ " $* " != *" $name "* ]] || continue
        case $type in
            tree) git --git-dir="$git" archive --prefix="$name/" "$obj" | tar -C "$dest" -x ;;
            blob) git --git-dir="$git" cat-file blob "$obj" >"$dest/$name" ;;
            *) log "ERROR: $name in $commit is a $type (a submodule?): this build takes trees and files only"; exit 1 ;;
        esac
    done < <(git --git-dir="$git" ls-tree "$commit")
}

build_validator_git() {  # nvidia-validator (static) and the workload manifests it reads, from NVIDIA's gpu-operator
    [[ -n $GPU_OPERATOR_GIT ]] || return 0
    local v=$GPU_OPERATOR_VERSION want=${KNOWN_OPERATOR_TAGS[$GPU_OPERATOR_VERSION]:-} commit
    [[ -n $want ]] || { log "ERROR: no known commit for gpu-operator $v (KNOWN_OPERATOR_TAGS)"; exit 1; }
    commit=$(git --git-dir="$GPU_OPERATOR_GIT" rev-parse --verify -q "refs/tags/$v^{commit}") ||
        { log "ERROR: $GPU_OPERATOR_GIT has no tag $v"; exit 1; }
    [[ $commit == "$want" ]] || { log "ERROR: tag $v is $commit in $GPU_OPERATOR_GIT, not $want"; exit 1; }
    local s="gpu-operator-$v@$commit"
    fresh nvidia-validator "$s" && [[ -f $BIN/validator-manifests/cuda-workload-validation.yaml ]] && return 0
    log "nvidia-validator: building $v from $GPU_OPERATOR_GIT ($commit)"
    local src=$WORK/gpu-operator-git
    rm -rf "$src"; mkdir -p "$src"
    # the module (go.mod, vendor/, the packages) without the e2e tests, docs, deployment assets and the CI submodule
    git_tree "$GPU_OPERATOR_GIT" "$commit" "$src" tests docs deployments bundle aws-kube-ci
    (cd "$src" && GOFLAGS="-mod=vendor -buildvcs=false" GOPROXY=off CGO_ENABLED=0 nice -n "$NICE" "$GO" build -trimpath \
        -ldflags "-s -w -X github.com/NVIDIA/gpu-operator/internal/info.version=$v" -o "$BIN/nvidia-validator" ./cmd/nvidia-validator)
    rm -rf "$BIN/validator-manifests"; mkdir -p "$BIN/validator-manifests"
    cp "$src"/validator/manifests/*.yaml "$BIN/validator-manifests/"
    stamp nvidia-validator "$s"
}

build_mig_manager_git() {  # nvidia-mig-manager and the nvidia-mig-parted it runs, from NVIDIA's mig-parted
    [[ -n $MIG_PARTED_GIT ]] || return 0
    local v=$MIG_MANAGER_VERSION want=${KNOWN_MIG_TAGS[$MIG_MANAGER_VERSION]:-} commit c
    [[ -n $want ]] || { log "ERROR: no known commit for mig-parted $v (KNOWN_MIG_TAGS)"; exit 1; }
    commit=$(git --git-dir="$MIG_PARTED_GIT" rev-parse --verify -q "refs/tags/$v^{commit}") ||
        { log "ERROR: $MIG_PARTED_GIT has no tag $v"; exit 1; }
    [[ $commit == "$want" ]] || { log "ERROR: tag $v is $commit in $MIG_PARTED_GIT, not $want"; exit 1; }
    local s="mig-parted-$v@$commit"
    fresh nvidia-mig-manager "$s" && fresh nvidia-mig-parted "$s" && return 0
    log "mig-parted: building $v from $MIG_PARTED_GIT ($commit)"
    local src=$WORK/mig-parted-git
    rm -rf "$src"; mkdir -p "$src"
    git_tree "$MIG_PARTED_GIT" "$commit" "$src" deployments examples .github
    # cgo: NVML through dlopen (go-nvml), as NVIDIA builds them
    (cd "$src" && for c in nvidia-mig-manager nvidia-mig-parted; do
        GOFLAGS="-mod=vendor -buildvcs=false" GOPROXY=off CGO_ENABLED=1 nice -n "$NICE" "$GO" build -trimpath \
            -ldflags "-s -w -X github.com/NVIDIA/mig-parted/internal/info.version=$v -X github.com/NVIDIA/mig-parted/internal/info.gitCommit=$commit" \
            -o "$BIN/$c" "./cmd/$c"
    done)
    for c in nvidia-mig-manager nvidia-mig-parted; do stamp "$c" "$s"; done
}

build_dra_driver_git() {  # gpu-kubelet-plugin and the files its image carries, from the DRA driver's repository
    [[ -n $DRA_DRIVER_GIT ]] || return 0
    local ref=$DRA_DRIVER_REF commit=${KNOWN_DRA_REFS[$DRA_DRIVER_REF]:-} tagged version
    [[ -n $commit ]] || { log "ERROR: no known commit for the DRA driver $ref (KNOWN_DRA_REFS)"; exit 1; }
    git --git-dir="$DRA_DRIVER_GIT" cat-file -e "$commit^{commit}" 2>/dev/null ||
        { log "ERROR: $DRA_DRIVER_GIT has no commit $commit ($ref)"; exit 1; }
    # a tag of that name, if the snapshot has one, must be the same commit
    tagged=$(git --git-dir="$DRA_DRIVER_GIT" rev-parse --verify -q "refs/tags/$ref^{commit}" || true)
    [[ -z $tagged || $tagged == "$commit" ]] || { log "ERROR: tag $ref is $tagged in $DRA_DRIVER_GIT, not $commit"; exit 1; }
    version=$(git --git-dir="$DRA_DRIVER_GIT" cat-file blob "$commit:VERSION" | tr -d '[:space:]')
    [[ $version == "$ref" ]] || { log "ERROR: $commit's VERSION says $version, not $ref"; exit 1; }
    local s="dra-driver-$ref@$commit"
    fresh gpu-kubelet-plugin "$s" && [[ -f $BIN/dra-driver-files/kubelet-plugin-prestart.sh ]] && return 0
    log "DRA driver: building gpu-kubelet-plugin $ref from $DRA_DRIVER_GIT ($commit)"
    local src=$WORK/dra-driver-git
    rm -rf "$src"; mkdir -p "$src"
    git_tree "$DRA_DRIVER_GIT" "$commit" "$src" site tests .github
    # cgo: NVML through dlopen (go-nvml), as the repository's Makefile builds it
    (cd "$src" && GOFLAGS="-mod=vendor -buildvcs=false" GOPROXY=off CGO_ENABLED=1 \
        CGO_LDFLAGS_ALLOW='-Wl,--unresolved-symbols=ignore-in-object-files' nice -n "$NICE" "$GO" build -trimpath \
        -ldflags "-s -w -X sigs.k8s.io/dra-driver-nvidia-gpu/internal/info.version=$ref -X sigs.k8s.io/dra-driver-nvidia-gpu/internal/info.gitCommit=$commit" \
        -o "$BIN/gpu-kubelet-plugin" ./cmd/gpu-kubelet-plugin)
    rm -rf "$BIN/dra-driver-files"; mkdir -p "$BIN/dra-driver-files"
    cp "$src/hack/kubelet-plugin-prestart.sh" "$BIN/dra-driver-files/"
    cp -r "$src/templates" "$BIN/dra-driver-files/templates"
    stamp gpu-kubelet-plugin "$s"
}

build_device_plugin() {
    if [[ -n $DEVICE_PLUGIN_GIT ]]; then build_device_plugin_git; return; fi
    local s="k8s-device-plugin-$DEVICE_PLUGIN_VERSION+$(sha256sum "$HERE"/patches/k8s-device-plugin-"$DEVICE_PLUGIN_VERSION"-*.patch | sha256sum | cut -c1-12)"
    dp_fresh "$s" || dp_restore "$s" && return 0
    log "k8s-device-plugin: building ($s)"
    local src=$WORK/k8s-device-plugin
    (cd /tmp && GOFLAGS=-mod=mod "$GO" mod download "github.com/NVIDIA/k8s-device-plugin@$DEVICE_PLUGIN_VERSION")
    rm -rf "$src"
    cp -r "$GOMODCACHE/github.com/!n!v!i!d!i!a/k8s-device-plugin@$DEVICE_PLUGIN_VERSION" "$src"
    chmod -R u+w "$src"
    rm -rf "$src/vendor"   # holds only modules.txt in the module zip
    for p in "$HERE"/patches/k8s-device-plugin-"$DEVICE_PLUGIN_VERSION"-*.patch; do
        patch -s -p1 -d "$src" <"$p"
    done
    (cd "$src" && GOFLAGS="-mod=mod -buildvcs=false" "$GO" mod tidy &&
        for c in "${DP_CMDS[@]}"; do
            GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=1 nice -n "$NICE" "$GO" build -trimpath \
                -ldflags "-s -w -X github.com/NVIDIA/k8s-device-plugin/internal/info.version=$DEVICE_PLUGIN_VERSION" \
                -o "$BIN/$c" "./cmd/$c"
        done)
    for c in "${DP_CMDS[@]}"; do stamp "$c" "$s"; done
    dp_keep "$s"
}

build_nfd() {
    # the module's go.mod replaces its API module with ./api/nfd, a module of its own that the module zip
    # leaves out (and `go install pkg@version` refuses replace directives): build in a copy of the source with
    # the API module's zip of the same version put where the replace points
    # the host's /etc, /sys, /boot... are read under /host-* (the worker DaemonSet's mounts), as NFD's own
    # image build sets it
    local s="node-feature-discovery-$NFD_VERSION+hostmount"
    fresh nfd-master "$s" && fresh nfd-worker "$s" && return 0
    log "node-feature-discovery: building ($s)"
    local src=$WORK/node-feature-discovery m=sigs.k8s.io/node-feature-discovery
    (cd /tmp && "$GO" mod download "$m@$NFD_VERSION" "$m/api/nfd@$NFD_VERSION")
    rm -rf "$src"; cp -r "$GOMODCACHE/$m@$NFD_VERSION" "$src"; chmod -R u+w "$src"
    rm -rf "$src/api/nfd"; cp -r "$GOMODCACHE/$m/api/nfd@$NFD_VERSION" "$src/api/nfd"; chmod -R u+w "$src/api/nfd"
    (cd "$src" && CGO_ENABLED=0 nice -n "$NICE" "$GO" build -mod=mod -trimpath \
        -ldflags "-s -w -X $m/pkg/version.version=$NFD_VERSION -X $m/pkg/utils/hostpath.pathPrefix=/host-" -o "$BIN/" ./cmd/nfd-master ./cmd/nfd-worker)
    stamp nfd-master "$s"; stamp nfd-worker "$s"
}

build_cni() {
    local s="cni-plugins-$CNI_PLUGINS_VERSION"
    fresh loopback "$s" && return 0
    log "loopback: building ($s)"
    go_install 0 "" "github.com/containernetworking/plugins/plugins/main/loopback@$CNI_PLUGINS_VERSION"
    stamp loopback "$s"
}

build_kubelet() {
    local s="k8s-$K8S_VERSION"
    fresh kubelet "$s" && return 0
    NICE=$NICE K8S_VERSION=$K8S_VERSION bash "$ROOT/tests/lab/cluster/build.sh" kubelet
    strip -o "$BIN/kubelet" "$CACHE/cluster/bin/kubelet" 2>/dev/null || cp "$CACHE/cluster/bin/kubelet" "$BIN/kubelet"
    stamp kubelet "$s"
}

build_small() {
    local s="pause-$(sha256sum "$HERE/pause.c" | cut -c1-12)"
    if ! fresh pause "$s"; then
        gcc -static -O2 -s -o "$BIN/pause" "$HERE/pause.c"; stamp pause "$s"
    fi
    install -m 0755 /bin/busybox "$BIN/busybox"
    install -m 0755 "$(command -v runc)" "$BIN/runc"
}

wheels() {
    # the versions of requirements-dev.lock (what the tests ran with), for the GPU machine's Python 3.12
    local pins
    pins=$(sed -nE 's/^(ansible-core|jinja2|markupsafe|pyyaml|packaging|resolvelib|nvidia-ml-py)==([^ ;]+).*/\1==\2/p' \
        "$ROOT/requirements-dev.lock" | sort -u)
    [[ $(wc -l <<<"$pins") == 7 ]] || { echo "requirements-dev.lock lacks a pin of the GPU bundle's wheels: $pins" >&2; return 1; }
    local d=$CACHE/gpu/wheels-$(sha256sum <<<"$pins" | cut -c1-12)
    if [[ ! -f $d/.ok ]]; then
        rm -rf "$d"; mkdir -p "$d"
        local py=$ROOT/.venv/bin/python; [[ -x $py ]] || py=python3
        "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
            --platform any -d "$d" \
            $pins
        # no cryptography (+ cffi, pycparser: 5 MB): local plays without vault do not import it
        touch "$d/.ok"
    fi
    mkdir -p "$BUNDLE/wheels"; rm -f "$BUNDLE"/wheels/*.whl; cp "$d"/*.whl "$BUNDLE/wheels/"
}

pack() {
    mkdir -p "$BUNDLE"
    local t=$WORK/pack; rm -rf "$t"; mkdir -p "$t/bin" "$t/toolkit/usr/bin"
    for c in containerd ctr containerd-shim-runc-v2 runc kubelet nvidia-device-plugin gpu-feature-discovery pause busybox; do
        cp "$BIN/$c" "$t/bin/"
    done
    for c in nvidia-ctk nvidia-container-runtime nvidia-cdi-hook; do cp "$BIN/$c" "$t/toolkit/usr/bin/"; done
    # the node's binaries in one xz stream with a dictionary larger than all of them together:
    # containerd/ctr/shim and kubelet/device plugin/GFD share most of their Go packages, so this is
    # 37 MB instead of 56 MB with xz's default dictionary (the call's limit is 64 MiB in all).
    # Repacked only when a binary changed (it takes ~3 min on 2 cores).
    local key; key=$(cd "$t/bin" && sha256sum * | sha256sum | cut -c1-16)
    if [[ ! -f $CACHE/gpu/bin-$key.tar.xz ]]; then
        rm -f "$CACHE"/gpu/bin-*.tar.xz
        tar -C "$t/bin" --owner=0 --group=0 --sort=name -cf - . | xz -T1 -9e --lzma2=preset=9e,dict=512MiB >"$CACHE/gpu/bin-$key.tar.xz.tmp"
        mv "$CACHE/gpu/bin-$key.tar.xz.tmp" "$CACHE/gpu/bin-$key.tar.xz"
    fi
    cp "$CACHE/gpu/bin-$key.tar.xz" "$BUNDLE/bin.tar.xz"
    # the toolkit as a release-shaped archive: what an air-gapped user mirrors and the
    # container_toolkit role installs with container_toolkit_install_method=archive
    local v=${NVIDIA_CTK_VERSION#v}
    tar -C "$t/toolkit" --owner=0 --group=0 --sort=name --mtime=@0 -cf - usr | xz -T1 -9e --lzma2=preset=9e,dict=64MiB >"$BUNDLE/nvidia-container-toolkit_${v}_linux_amd64.tar.xz"
    (cd "$BUNDLE" && sha256sum nvidia-container-toolkit_*.tar.xz >SHA256SUMS)
    # the controller there is the node itself: site.yml's cluster play needs kubernetes.core
    # (the version pinned for the controller here, from the `ansible` package in .venv)
    local kc; kc=$("$ROOT/.venv/bin/python" -c 'import ansible_collections.kubernetes.core as k, os; print(os.path.dirname(k.__file__))' 2>/dev/null ||
        ls -d "$ROOT"/.venv/lib/python3*/site-packages/ansible_collections/kubernetes/core | head -1)
    rm -rf "$BUNDLE/collections"; mkdir -p "$BUNDLE/collections/ansible_collections/kubernetes"
    cp -r "$kc" "$BUNDLE/collections/ansible_collections/kubernetes/core"
    {
        echo "containerd=$CONTAINERD_VERSION"
        echo "runc=$(runc --version | head -1 | awk '{print $3}')"
        echo "nvidia-container-toolkit=$NVIDIA_CTK_VERSION"
        echo "k8s-device-plugin=$DEVICE_PLUGIN_VERSION"
        if [[ -n $DEVICE_PLUGIN_GIT ]]; then echo "k8s-device-plugin-commit=${KNOWN_TAGS[$DEVICE_PLUGIN_VERSION]}"; fi
        echo "kubelet=$K8S_VERSION"
        echo "ansible-core=$ANSIBLE_CORE_VERSION"
    } >"$BUNDLE/versions.txt"
    log "bundle: $(du -sh "$BUNDLE" | cut -f1) in $BUNDLE"
    ls -l "$BUNDLE" >&2
}

need_apt
t0=$SECONDS
build_small
build_containerd
build_toolkit
build_device_plugin
build_validator_git
build_mig_manager_git
build_dra_driver_git
build_nfd
build_cni
build_kubelet
# the binaries are what the lock guards: a `build.sh bin` waiting in the other test queue goes on now, while
# this run packs its bundle from them
flock -u 9
if [[ ${1:-} == bin ]]; then log "binaries in $BIN ($((SECONDS - t0)) s)"; exit 0; fi
wheels
pack
log "done in $((SECONDS - t0)) s"
