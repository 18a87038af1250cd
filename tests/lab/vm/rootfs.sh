#!/usr/bin/env bash
# The VM lane's Debian bookworm root filesystem as a cached tar (debootstrap minbase with systemd, sshd,
# python3, the cloud kernel and grub-pc).  Prints the tar's path.  Needs root (debootstrap, chroot).
# Used by build-image.sh (the base image) and tests/lab/driver/native.sh (the driver root).
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || die "building the root filesystem needs root (debootstrap/chroot)"
PKGS="systemd,systemd-sysv,udev,dbus,kmod,openssh-server,python3,linux-image-cloud-amd64,initramfs-tools,pciutils,iproute2,procps,zstd"
ROOTFS_TAR="$VM_CACHE/rootfs-$DEBIAN_SUITE-$(echo "$PKGS $DEBIAN_MIRROR" | sha256sum | cut -c1-12).tar"
[ -f "$ROOTFS_TAR" ] && { echo "$ROOTFS_TAR"; exit 0; }
"$VM_LANE_DIR/deps.sh"
mkdir -p "$VM_CACHE"
work="$(mktemp -d "$VM_CACHE/rootfs.XXXXXX")"
cleanup() {
  for m in dev/pts dev proc sys; do while mountpoint -q "$work/rootfs/$m" 2>/dev/null; do umount -l "$work/rootfs/$m"; done; done
  # never recurse into this machine's /dev or /proc through a mount left behind
  if grep -q " $work/" /proc/mounts; then log "mounts remain under $work: left in place"; return; fi
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT
rootfs="$work/rootfs"
mkdir -p "$rootfs"
log "debootstrap $DEBIAN_SUITE from $DEBIAN_MIRROR (cold: several minutes)"
debootstrap --variant=minbase --include="$PKGS" "$DEBIAN_SUITE" "$rootfs" "$DEBIAN_MIRROR" \
  >"$work/debootstrap.log" 2>&1 || { tail -30 "$work/debootstrap.log"; cp "$work/debootstrap.log" "$VM_CACHE/debootstrap-failed.log"; die "debootstrap failed"; }
# grub-pc without touching any real disk: divert the commands that would probe / install.
mount --bind /dev "$rootfs/dev"; mount -t proc proc "$rootfs/proc"; mount -t sysfs sys "$rootfs/sys"
for f in /usr/sbin/update-grub /usr/sbin/grub-install; do
  chroot "$rootfs" dpkg-divert --local --rename --add "$f" >/dev/null
  chroot "$rootfs" ln -sf /bin/true "$f"
done
cat <<'DEB' | chroot "$rootfs" debconf-set-selections
grub-pc grub-pc/install_devices multiselect
grub-pc grub-pc/install_devices_empty boolean true
DEB
chroot "$rootfs" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends grub-pc \
  >>"$work/debootstrap.log" 2>&1 || { tail -30 "$work/debootstrap.log"; die "grub-pc install failed"; }
for f in /usr/sbin/update-grub /usr/sbin/grub-install; do
  rm -f "$rootfs$f"; chroot "$rootfs" dpkg-divert --local --rename --remove "$f" >/dev/null
done
chroot "$rootfs" apt-get clean
for m in dev proc sys; do umount -l "$rootfs/$m"; done
tar -C "$rootfs" -cpf "$ROOTFS_TAR.tmp" . && mv "$ROOTFS_TAR.tmp" "$ROOTFS_TAR"
echo "$ROOTFS_TAR"
