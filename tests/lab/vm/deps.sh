#!/usr/bin/env bash
# Install the host packages the VM lane needs (Debian/Ubuntu hosts). Fast no-op when present.
source "$(dirname "$0")/lib.sh"
pkgs=(qemu-system-x86 qemu-utils debootstrap grub-pc-bin grub-common fdisk openssh-client e2fsprogs)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
[ "$(id -u)" = 0 ] || die "need root to apt-get install: ${missing[*]}"
log "installing ${missing[*]}"
if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' -mmin -1440 2>/dev/null | head -1)" ]; then
  apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null || log "apt-get update reported errors (continuing)"
fi
DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}" >/dev/null
