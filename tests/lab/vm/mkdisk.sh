#!/usr/bin/env bash
# Make a bootable raw disk image of a lane root filesystem directory:
#   mkdisk.sh ROOTFS_DIR OUT_IMG [HOSTNAME] [SIZE_MIB]
# Guest configuration (hostname, fstab, DHCP on en*, the lane's SSH key, serial console, IOMMU off in
# GRUB's command line), then an MBR disk with one ext4 partition at 1 MiB (mkfs.ext4 -E offset -d) and
# GRUB i386-pc boot.img + core.img written with dd; GRUB reads the guest's own /boot/grub/grub.cfg.
# Modifies ROOTFS_DIR (the guest configuration).  Needs root (chroot).
source "$(dirname "$0")/lib.sh"
rootfs="${1:?usage: mkdisk.sh ROOTFS_DIR OUT_IMG [HOSTNAME] [SIZE_MIB]}"; out="${2:?out image}"
vm_hostname="${3:-gpuvm}"; size_mib="${4:-3072}"
[[ "$vm_hostname" =~ ^[a-z0-9][a-z0-9-]{0,62}$ ]] || die "bad hostname '$vm_hostname'"
[ -f "$VM_SSH_KEY" ] || ssh-keygen -q -t ed25519 -N '' -C gpuops-vm-lane -f "$VM_SSH_KEY"
work="$(mktemp -d "$(dirname "$out")/mkdisk.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# --- guest configuration -----------------------------------------------------
uuid="$(cat /proc/sys/kernel/random/uuid)"
kver="$(basename "$(ls "$rootfs"/boot/vmlinuz-* | sort -V | tail -1)" | sed 's/^vmlinuz-//')"
echo "$vm_hostname" >"$rootfs/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 %s\n' "$vm_hostname" >"$rootfs/etc/hosts"
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
# no_timer_check: under TCG on a loaded host the boot-time check of the timer through the interrupt-remapped
# IO-APIC can miss its ticks and panic ("timer doesn't work through Interrupt-remapped IO-APIC").
GRUB_DEFAULT=0
GRUB_TIMEOUT=0
GRUB_DISTRIBUTOR=Debian
GRUB_CMDLINE_LINUX_DEFAULT=""
GRUB_CMDLINE_LINUX="console=ttyS0,115200 intel_iommu=off no_timer_check"
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
  linux /boot/vmlinuz-$kver root=UUID=$uuid ro console=ttyS0,115200 intel_iommu=off no_timer_check
  initrd /boot/initrd.img-$kver
}
CFG

# --- disk image ----------------------------------------------------------------
img="$work/disk.img"
truncate -s "${size_mib}M" "$img"
mkfs.ext4 -q -F -U "$uuid" -L gpuvm-root -E offset=1048576 -d "$rootfs" "$img" "$((size_mib - 1))M"
echo 'start=2048, type=83, bootable' | sfdisk -q --no-reread --no-tell-kernel "$img"
grub-mkimage -O i386-pc -o "$work/core.img" -p '(hd0,msdos1)/boot/grub' \
  biosdisk part_msdos ext2 normal linux configfile search search_fs_uuid serial terminal echo test
[ "$(stat -c %s "$work/core.img")" -lt $((2047 * 512)) ] || die "core.img too large for the MBR gap"
dd if=/usr/lib/grub/i386-pc/boot.img of="$img" bs=440 count=1 conv=notrunc status=none
dd if="$work/core.img" of="$img" bs=512 seek=1 conv=notrunc status=none
mv "$img" "$out"
log "built $out (kernel $kver, root UUID $uuid)"
