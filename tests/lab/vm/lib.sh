# shellcheck shell=bash
# Common settings for the VM lane scripts (sourced, never run).
set -euo pipefail
VM_LANE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$VM_LANE_DIR/../../.." && pwd)"
GPUOPS_CACHE="${GPUOPS_CACHE:-$HOME/.cache/gpuops}"
VM_CACHE="${VM_CACHE:-$GPUOPS_CACHE/vm}"
VM_STATE="${VM_STATE:-$REPO_ROOT/.lab/vm}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
DEBIAN_SUITE="${DEBIAN_SUITE:-bookworm}"
VM_MEM="${VM_MEM:-1024}"
# Cache key: changes to the image recipe rebuild the image, nothing else does.
VM_IMAGE_KEY="$(cat "$VM_LANE_DIR/build-image.sh" "$VM_LANE_DIR/rootfs.sh" "$VM_LANE_DIR/mkdisk.sh" | sha256sum | cut -c1-12)"
VM_BASE_IMAGE="$VM_CACHE/bookworm-$VM_IMAGE_KEY.img"
VM_SSH_KEY="$VM_CACHE/id_ed25519"
log() { printf '[vm %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
valid_name() { [[ "$1" =~ ^[a-z0-9][a-z0-9_-]{0,30}$ ]] || die "bad VM name '$1' (lower-case letters, digits, - and _)"; }
vm_dir() { echo "$VM_STATE/${1:?vm name}"; }
ssh_opts() {
  echo "-i $VM_SSH_KEY -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o ConnectTimeout=5 -o BatchMode=yes"
}
