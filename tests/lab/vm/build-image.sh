#!/usr/bin/env bash
# Build (or reuse from cache) the VM lane's base disk image:
#   debootstrap bookworm rootfs (systemd, sshd, python3, cloud kernel, grub-pc)
#   -> raw disk: MBR (sfdisk) + ext4 partition at 1 MiB (mkfs.ext4 -E offset -d rootfs)
#   -> GRUB i386-pc boot.img + core.img written with dd; GRUB reads the guest's own
#      /boot/grub/grub.cfg, so `update-grub` inside the guest takes effect on reboot.
# IOMMU is OFF in the image's kernel command line.  Prints the image path.
# Needs root (debootstrap, chroot).  Everything is cached under $VM_CACHE.
source "$(dirname "$0")/lib.sh"
[ -f "$VM_BASE_IMAGE" ] && { echo "$VM_BASE_IMAGE"; exit 0; }
[ "$(id -u)" = 0 ] || die "building the VM image needs root (debootstrap/chroot)"

ROOTFS_TAR="$("$VM_LANE_DIR/rootfs.sh")"
mkdir -p "$VM_CACHE"
work="$(mktemp -d "$VM_CACHE/build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/rootfs"
tar -C "$work/rootfs" -xpf "$ROOTFS_TAR"
"$VM_LANE_DIR/mkdisk.sh" "$work/rootfs" "$work/disk.img" gpuvm
mv "$work/disk.img" "$VM_BASE_IMAGE"
# drop images built from older recipes (running VMs keep their overlay's backing file open)
find "$VM_CACHE" -maxdepth 1 -name 'bookworm-*.img' ! -name "$(basename "$VM_BASE_IMAGE")" -delete
log "built $VM_BASE_IMAGE"
echo "$VM_BASE_IMAGE"
