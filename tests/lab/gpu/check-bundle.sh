#!/usr/bin/env bash
# CI half of the GPU node lane (make test-gpu-bundle): the bundle that travels to the GPU machine
# builds from a fresh clone, every binary in it runs here and reports the pinned version, the
# toolkit archive matches its checksum and holds exactly the three binaries the role links, the
# patched GFD still has its file output, and bundle + working tree fit the 64 MiB a call carries.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
BUNDLE=${BUNDLE:-$ROOT/.gpu-bundle}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0
ok() { printf 'ok   %s\n' "$*"; }
bad() { printf 'FAIL %s\n' "$*"; fail=1; }
# shellcheck disable=SC1091
source <(sed 's/^/V_/; s/-/_/g' "$BUNDLE/versions.txt")
xz -dc "$BUNDLE/bin.tar.xz" | tar -C "$T" -xf -
expect() {  # expect <binary> <version substring> <args...>
    local b=$1 want=$2; shift 2
    local out; out=$("$T/$b" "$@" 2>&1 || true); out=$(head -3 <<<"$out")
    if grep -q -- "$want" <<<"$out"; then ok "$b: $want"; else bad "$b: wanted '$want', got: $out"; fi
}
expect containerd "${V_containerd#v}" --version
expect ctr "${V_containerd#v}" --version
expect containerd-shim-runc-v2 "${V_containerd#v}" -v
expect runc "runc version" --version
expect kubelet "$V_kubelet" --version
expect nvidia-device-plugin "${V_k8s_device_plugin}" --version
expect gpu-feature-discovery "${V_k8s_device_plugin}" --version
expect busybox "BusyBox" --help
# output captured first: with pipefail, grep -q quitting at its first match leaves the writer to die of
# SIGPIPE and the pipeline fails even though the flag is there (seen in a CI run)
gfd_help=$("$T/gpu-feature-discovery" --help 2>&1 || true)
if grep -q -- '--output-file' <<<"$gfd_help"; then ok "gpu-feature-discovery keeps --output-file"; else bad "gpu-feature-discovery lost --output-file"; fi
pause_file=$(file "$T/pause" 2>/dev/null || true)
grep -q 'statically linked' <<<"$pause_file" && ok "pause is static" || bad "pause is not static"
(cd "$BUNDLE" && sha256sum -c --quiet SHA256SUMS) && ok "toolkit archive checksum" || bad "toolkit archive checksum"
members=$(tar -tJf "$BUNDLE"/nvidia-container-toolkit_*_linux_amd64.tar.xz | grep -v '/$' | sort | tr '\n' ' ')
[[ $members == "usr/bin/nvidia-cdi-hook usr/bin/nvidia-container-runtime usr/bin/nvidia-ctk " ]] &&
    ok "toolkit archive: $members" || bad "toolkit archive members: $members"
mkdir -p "$T/tk" && tar -C "$T/tk" -xJf "$BUNDLE"/nvidia-container-toolkit_*_linux_amd64.tar.xz
for b in nvidia-ctk nvidia-container-runtime nvidia-cdi-hook; do
    v=$("$T/tk/usr/bin/$b" --version 2>&1 || true)
    grep -q "${V_nvidia_container_toolkit#v}" <<<"$v" && ok "$b ${V_nvidia_container_toolkit}" || bad "$b version"
done
ls "$BUNDLE"/wheels/ansible_core-"$V_ansible_core"-*.whl >/dev/null && ok "ansible-core $V_ansible_core wheel" || bad "no ansible-core wheel"
tree=$(cd "$ROOT" && { git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null || true; } | tail -1 | cut -f1)
carry=$(du -cb "$BUNDLE" "$ROOT/.collections" | tail -1 | cut -f1)
total=$((tree + carry)); limit=$((64 * 1024 * 1024))
((total < limit)) && ok "carried $((total / 1048576)) MiB < 64 MiB (tree $((tree / 1048576)), bundle+collection $((carry / 1048576)))" ||
    bad "carried $((total / 1048576)) MiB >= 64 MiB"
exit $fail
