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
"$VM_LANE_DIR/deps.sh"
mkdir -p "$VM_CACHE"
[ -f "$VM_SSH_KEY" ] || ssh-keygen -q -t ed25519 -N '' -C gpuops-vm-lane -f "$VM_SSH_KEY"

PKGS="systemd,systemd-sysv,udev,dbus,kmod,openssh-server,python3,linux-image-cloud-amd64,initramfs-tools,pciutils,iproute2,procps,zstd"
ROOTFS_TAR="$VM_CACHE/rootfs-$DEBIAN_SUITE-$(echo "$PKGS $DEBIAN_MIRROR" | sha256sum | cut -c1-12).tar"
work="$(mktemp -d "$VM_CACHE/build.XXXXXX")"
cleanup() {
  for m in dev/pts dev proc sys; do mountpoint -q "$work/rootfs/$m" 2>/dev/null && umount -l "$work/rootfs/$m"; done
  rm -rf "$work"
}
trap cleanup EXIT
rootfs="$work/rootfs"
mkdir -p "$rootfs"

if [ -f "$ROOTFS_TAR" ]; then
  log "reusing cached debootstrap rootfs $ROOTFS_TAR"
  tar -C "$rootfs" -xpf "$ROOTFS_TAR"
else
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
fi

# --- guest configuration -----------------------------------------------------
uuid="$(cat /proc/sys/kernel/random/uuid)"
kver="$(basename "$(ls "$rootfs"/boot/vmlinuz-* | sort -V | tail -1)" | sed 's/^vmlinuz-//')"
echo gpuvm >"$rootfs/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 gpuvm\n' >"$rootfs/etc/hosts"
printf 'UUID=%s / ext4 errors=remount-ro 0 1\n' "$uuid" >"$rootfs/etc/fstab"
printf 'nameserver 10.0.2.3\n' >"$rootfs/etc/resolv.conf"
mkdir -p "$rootfs/etc/systemd/network"
printf '[Match]\nName=en*\n\n[Network]\nDHCP=ipv4\n' >"$rootfs/etc/systemd/network/10-wired.network"
chroot "$rootfs" systemctl enable systemd-networkd.service >/dev/null 2>&1
chroot "$rootfs" systemctl mask systemd-networkd-wait-online.service apt-daily.timer apt-daily-upgrade.timer e2scrub_reap.service >/dev/null 2>&1 || true
install -d -m 700 "$rootfs/root/.ssh"
install -m 600 "$VM_SSH_KEY.pub" "$rootfs/root/.ssh/authorized_keys"
cat >"$rootfs/etc/default/grub" <<GRUB
# gpuops VM lane: IOMMU deliberately OFF (the Debian 6.1 kernel enables it by default); the vfio role turns it on.
GRUB_DEFAULT=0
GRUB_TIMEOUT=0
GRUB_DISTRIBUTOR=Debian
GRUB_CMDLINE_LINUX_DEFAULT=""
GRUB_CMDLINE_LINUX="console=ttyS0,115200 intel_iommu=off"
GRUB_TERMINAL=serial
GRUB_SERIAL_COMMAND="serial --unit=0 --speed=115200"
GRUB_DISABLE_OS_PROBER=true
GRUB
mkdir -p "$rootfs/boot/grub/i386-pc"
cp "$rootfs"/usr/lib/grub/i386-pc/*.mod "$rootfs"/usr/lib/grub/i386-pc/*.lst "$rootfs/boot/grub/i386-pc/"
# First-boot grub.cfg (what update-grub would produce, minus the frills).
cat >"$rootfs/boot/grub/grub.cfg" <<CFG
serial --unit=0 --speed=115200
terminal_input serial
terminal_output serial
set timeout=0
menuentry 'Debian GNU/Linux (gpuops VM lane first boot)' {
  search --no-floppy --fs-uuid --set=root $uuid
  linux /boot/vmlinuz-$kver root=UUID=$uuid ro console=ttyS0,115200 intel_iommu=off
  initrd /boot/initrd.img-$kver
}
CFG

# --- disk image ----------------------------------------------------------------
size_mib=3072
img="$work/disk.img"
truncate -s "${size_mib}M" "$img"
mkfs.ext4 -q -F -U "$uuid" -L gpuvm-root -E offset=1048576 -d "$rootfs" "$img" "$((size_mib - 1))M"
echo 'start=2048, type=83, bootable' | sfdisk -q --no-reread --no-tell-kernel "$img"
grub-mkimage -O i386-pc -o "$work/core.img" -p '(hd0,msdos1)/boot/grub' \
  biosdisk part_msdos ext2 normal linux configfile search search_fs_uuid serial terminal echo test
[ "$(stat -c %s "$work/core.img")" -lt $((2047 * 512)) ] || die "core.img too large for the MBR gap"
dd if=/usr/lib/grub/i386-pc/boot.img of="$img" bs=440 count=1 conv=notrunc status=none
dd if="$work/core.img" of="$img" bs=512 seek=1 conv=notrunc status=none
mv "$img" "$VM_BASE_IMAGE"
# drop images built from older recipes (running VMs keep their overlay's backing file open)
find "$VM_CACHE" -maxdepth 1 -name 'bookworm-*.img' ! -name "$(basename "$VM_BASE_IMAGE")" -delete
log "built $VM_BASE_IMAGE (kernel $kver, root UUID $uuid)"
echo "$VM_BASE_IMAGE"
