#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Driver lane, natively (no emulation): roles/driver against a Debian bookworm root made with debootstrap on
# this machine (connection community.general.chroot), then the VM lane boots that root.
#   Part 1 (chroot)  bad input refused with the root unchanged; install of Debian's non-free driver 535 with
#                    DKMS building the module for the ROOT's kernel (not this machine's), signed with a key the
#                    role generates; apt pin + hold, nouveau/nova_core blacklist in the initramfs, persistenced
#                    enabled; a second run and a check-mode run change nothing.
#   Part 2 (qemu)    the root as a disk, booted: `modprobe nvidia` fails only with "No such device", nouveau
#                    not loaded, blacklist in the initramfs, modinfo shows our signer, no compiler run in the guest.
#   Part 1 again     state=absent leaves exactly the packages the root had before, and the /etc it had before
#                    (apart from what dpkg itself keeps); absent again changes nothing.
# Caches (GPUOPS_CACHE/driver): .deb archives, and ccache for the DKMS build (content-keyed: kernel headers,
# driver source and compiler -- a new kernel or driver version compiles, a rerun does not).
# Logs and timings: .lab/driver-native/.  DRIVER_NATIVE_KEEP=1 keeps the root and leaves the VM running.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
VM="$REPO/tests/lab/vm"
source "$VM/lib.sh"
BIN="${BIN:-$REPO/.venv/bin}"
OUT="${DRIVER_NATIVE_OUT:-$REPO/.lab/driver-native}"
KEEP="${DRIVER_NATIVE_KEEP:-0}"
CACHE="$GPUOPS_CACHE/driver"
NAME=drvnative
ROOT="$OUT/root"
[ "$(id -u)" = 0 ] || die "the driver lane needs root (chroot, mounts)"
mkdir -p "$OUT" "$CACHE/apt-archives/partial" "$CACHE/ccache"
t0=$(date +%s)

# A private copy of the built collection (a concurrent `make install` must not pull modules from under us).
TARBALL="$(ls -t "$REPO"/build/gpuops-nvidia-*.tar.gz | head -1)"
rm -rf "$OUT/collections"
"$BIN/ansible-galaxy" collection install --force --no-deps -p "$OUT/collections" "$TARBALL" >/dev/null
SITE="$("$BIN/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
export ANSIBLE_COLLECTIONS_PATH="$OUT/collections:$SITE"   # community.general (chroot) from the ansible package
export ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0 ANSIBLE_HOST_KEY_CHECKING=False ANSIBLE_STDOUT_CALLBACK=default
export ANSIBLE_CALLBACK_RESULT_FORMAT=yaml

mounts=(proc dev dev/pts etc/resolv.conf var/cache/apt/archives var/cache/gpuops-ccache)
unmount_root() {
  local m i
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
    m="$ROOT/${mounts[$i]}"; mountpoint -q "$m" 2>/dev/null && umount -l "$m"
  done
  return 0
}
mount_root() {
  mount -t proc proc "$ROOT/proc"
  # a private /dev (never a bind of this machine's: deleting the root must not reach this machine's devices)
  mount -t tmpfs -o mode=755,size=8m gpuops-dev "$ROOT/dev"
  local n
  for n in "null 1 3" "zero 1 5" "full 1 7" "random 1 8" "urandom 1 9" "tty 5 0"; do
    set -- $n; mknod -m 666 "$ROOT/dev/$1" c "$2" "$3"
  done
  mkdir "$ROOT/dev/pts" "$ROOT/dev/shm"; ln -s pts/ptmx "$ROOT/dev/ptmx"; ln -s /proc/self/fd "$ROOT/dev/fd"
  ln -s /proc/self/fd/0 "$ROOT/dev/stdin"; ln -s /proc/self/fd/1 "$ROOT/dev/stdout"; ln -s /proc/self/fd/2 "$ROOT/dev/stderr"
  mount -t devpts -o newinstance,ptmxmode=0666 devpts "$ROOT/dev/pts"
  mount --bind -o ro /etc/resolv.conf "$ROOT/etc/resolv.conf"
  mkdir -p "$ROOT/var/cache/gpuops-ccache"
  mount --bind "$CACHE/apt-archives" "$ROOT/var/cache/apt/archives"
  mount --bind "$CACHE/ccache" "$ROOT/var/cache/gpuops-ccache"
}
remove_root() {  # never recurse into anything still mounted under the root
  if grep -q " $ROOT[/ ]" /proc/mounts; then log "mounts remain under $ROOT: not deleting it"; return 1; fi
  rm -rf --one-file-system "$ROOT"
}
cleanup() {
  unmount_root
  if [ "$KEEP" != 1 ]; then "$VM/stop.sh" "$NAME" >/dev/null 2>&1 || true; remove_root || true; rm -f "$OUT/disk.img"; fi
}
trap cleanup EXIT

# --- the root --------------------------------------------------------------------------------------
ROOTFS_TAR="$("$VM/rootfs.sh")"
unmount_root; [ ! -e "$ROOT" ] || remove_root || die "could not clear $ROOT"; mkdir -p "$ROOT"
tar -C "$ROOT" -xpf "$ROOTFS_TAR"
KVER="$(basename "$(ls "$ROOT"/boot/vmlinuz-* | sort -V | tail -1)" | sed 's/^vmlinuz-//')"
[ "$KVER" != "$(uname -r)" ] || die "the root's kernel equals this machine's: the lane would not prove the target kernel"
# resolv.conf is bind-mounted read-only over the guest's; mkdisk.sh writes the guest's own later
rm -f "$ROOT/etc/resolv.conf"; : >"$ROOT/etc/resolv.conf"
mount_root
# Lane set-up (a user's host has its own): daemons never start in a chroot (Debian's policy-rc.d), and DKMS
# compiles through ccache (Debian's kernel headers honour DEBIAN_KERNEL_USE_CCACHE, which DKMS reads from
# their .kernelvariables), its cache kept on this machine.
printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"; chmod 755 "$ROOT/usr/sbin/policy-rc.d"
chroot "$ROOT" apt-get -q update >"$OUT/setup.log" 2>&1
chroot "$ROOT" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends ccache >>"$OUT/setup.log" 2>&1
export DEBIAN_KERNEL_USE_CCACHE=1 CCACHE=ccache CCACHE_DIR=/var/cache/gpuops-ccache CCACHE_MAXSIZE=2G CCACHE_BASEDIR=/var/lib/dkms
chroot "$ROOT" ccache -z >/dev/null

snapshot() {  # snapshot NAME: installed packages and /etc content (dpkg's own bookkeeping aside)
  chroot "$ROOT" dpkg-query -W -f '${Package} ${Version}\n' | sort >"$OUT/$1.packages"
  python3 - "$ROOT" >"$OUT/$1.etc" <<'PY'
import hashlib, os, sys
root = sys.argv[1]
skip = {"etc/resolv.conf", "etc/ld.so.cache"}
# the account databases are compared by account name below (their -backups and shadow hashes follow)
skip |= {"etc/" + n + sfx for n in ("passwd", "group", "shadow", "gshadow") for sfx in ("", "-")}
for dirpath, dirs, files in sorted(os.walk(os.path.join(root, "etc"))):
    dirs.sort()
    for name in sorted(files + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]):
        path = os.path.join(dirpath, name)
        rel = os.path.relpath(path, root)
        if rel in skip or name.endswith("-old"):
            continue
        if os.path.islink(path):
            print("link %s -> %s" % (rel, os.readlink(path)))
        elif os.path.isfile(path):
            with open(path, "rb") as f:
                print("file %s %s" % (rel, hashlib.sha256(f.read()).hexdigest()))
PY
  { sed 's/:.*//; s/^/user /' "$ROOT/etc/passwd"; sed 's/:.*//; s/^/group /' "$ROOT/etc/group"; } | sort >"$OUT/$1.accounts"
}
snapshot pristine

cat >"$OUT/hosts.yml" <<YAML
all:
  hosts:
    drvroot:
      ansible_connection: community.general.chroot
      ansible_host: $ROOT
      ansible_python_interpreter: /usr/bin/python3
YAML
play() {  # play LOG [args...] -> seconds; log in $OUT/LOG.log
  local log="$OUT/$1.log" s; shift; s=$(date +%s)
  if ! "$BIN/ansible-playbook" -i "$OUT/hosts.yml" "$HERE/native.yml" "$@" >"$log" 2>&1; then
    tail -60 "$log" >&2; die "ansible-playbook failed, see $log"
  fi
  echo $(( $(date +%s) - s ))
}
recap() { sed -n "s/.* $2=\([0-9]*\) .*/\1/p" "$OUT/$1.log" | tail -1; }

# --- Part 1: bad input first, on the pristine root -------------------------------------------------------
log "bad input: each refused before anything changes"
bad_s=$(play 0-bad-input -e driver_lab_phase=bad-input)
snapshot after-bad
cmp -s "$OUT/pristine.packages" "$OUT/after-bad.packages" || die "bad input changed the packages"
cmp -s "$OUT/pristine.etc" "$OUT/after-bad.etc" || { diff "$OUT/pristine.etc" "$OUT/after-bad.etc" >&2; die "bad input changed /etc"; }

log "run 1: install (root kernel $KVER, this machine's $(uname -r)); DKMS builds natively"
install_s=$(play 1-install -e driver_lab_phase=present)
dkms_s=$(python3 - "$ROOT" <<'PY'
import glob, os, subprocess, sys
log = sorted(glob.glob(sys.argv[1] + "/var/lib/dkms/nvidia-current/*/*/x86_64/log/make.log"))
if log:
    start = subprocess.run(["date", "-d", open(log[-1]).read().splitlines()[1], "+%s"], capture_output=True, text=True).stdout
    print(int(os.stat(log[-1]).st_mtime) - int(start))
PY
)
# the install runs in the background and its wait prints a line every driver_progress_interval (15) seconds
progress=$(grep -c "RETRYING: .*Wait for the driver packages and, with DKMS, the build of its kernel module" "$OUT/1-install.log" || true)
[ "${progress:-0}" -gt 0 ] || die "the install's wait printed no progress line (a ${install_s}-s install): see $OUT/1-install.log"
log "the install's wait printed $progress progress line(s)"
ccache_stats="$(chroot "$ROOT" ccache -s 2>/dev/null | tr -s ' ' | grep -E '^ *(Hits|Misses)' | tr '\n' ';')"
log "run 2: the same again must change nothing"
again_s=$(play 2-again -e driver_lab_phase=present)
[ "$(recap 2-again changed)" = 0 ] || die "second run changed $(recap 2-again changed) task(s): see $OUT/2-again.log"
log "run 3: check mode must change nothing"
check_s=$(play 3-check -e driver_lab_phase=present --check)
[ "$(recap 3-check changed)" = 0 ] || die "check mode reported $(recap 3-check changed) change(s): see $OUT/3-check.log"

# --- Part 2: boot what was built --------------------------------------------------------------------------
log "boot the root in the VM lane (no compiler runs in the guest)"
unmount_root
grep -q " $ROOT[/ ]" /proc/mounts && die "mounts remain under $ROOT"
rm -rf --one-file-system "$OUT/guest-root"; cp -a "$ROOT" "$OUT/guest-root"
rm -f "$OUT/guest-root/usr/sbin/policy-rc.d"
"$VM/mkdisk.sh" "$OUT/guest-root" "$OUT/disk.img" drvnative 4096 >/dev/null
rm -rf --one-file-system "$OUT/guest-root"
"$VM/stop.sh" "$NAME" >/dev/null 2>&1 || true
VM_IMAGE="$OUT/disk.img" "$VM/start.sh" "$NAME"
boot_s=$("$VM/wait-ssh.sh" "$NAME" 600)
port="$(cat "$(vm_dir "$NAME")/ssh.port")"
cat >"$OUT/guest.yml" <<YAML
all:
  hosts:
    $NAME:
      ansible_host: 127.0.0.1
      ansible_port: $port
      ansible_user: root
      ansible_ssh_private_key_file: $VM_SSH_KEY
      ansible_ssh_common_args: -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR
      ansible_python_interpreter: /usr/bin/python3
YAML
s=$(date +%s)
"$BIN/ansible-playbook" -i "$OUT/guest.yml" "$HERE/native-boot.yml" -e "driver_lab_kernel=$KVER" >"$OUT/4-boot.log" 2>&1 \
  || { tail -60 "$OUT/4-boot.log" >&2; die "the booted guest failed its checks: see $OUT/4-boot.log"; }
guest_s=$(( $(date +%s) - s ))
[ "$KEEP" = 1 ] || "$VM/stop.sh" "$NAME" >/dev/null
# The booted image (driver installed, module built and signed) is kept for lanes that need a node with a
# driver, e.g. the rolling upgrade's VM node (tests/lab/cluster/upgrade-vm.sh, DRIVER_IMAGE=...).
DRV="$(chroot "$ROOT" dpkg-query -W -f '${Version}' nvidia-kernel-dkms 2>/dev/null | cut -d- -f1 || true)"
if [ "$KEEP" != 1 ]; then
  mkdir -p "$CACHE/images"; rm -f "$CACHE"/images/*.img
  mv "$OUT/disk.img" "$CACHE/images/bookworm-$KVER-nvidia-$DRV.img"
  log "kept $CACHE/images/bookworm-$KVER-nvidia-$DRV.img"
fi

# --- Part 1 again: state=absent --------------------------------------------------------------------------
mount_root
log "run 5: state=absent removes what the role installed and nothing else"
absent_s=$(play 5-absent -e driver_lab_phase=absent)
snapshot after-absent
diff "$OUT/pristine.packages" "$OUT/after-absent.packages" >"$OUT/absent-packages.diff" \
  || { cat "$OUT/absent-packages.diff" >&2; die "state=absent did not restore the package set (see $OUT/absent-packages.diff)"; }
# /etc: what the role wrote is gone; dpkg keeps nothing of purged packages; alternatives/initramfs caches aside
diff "$OUT/pristine.etc" "$OUT/after-absent.etc" >"$OUT/absent-etc.diff" || true
# one grep, no pipe: under pipefail a `grep -v | grep -q .` whose first grep is SIGPIPEd reads as "no difference"
if grep -qvE '^[0-9,acd]+$|^---$' "$OUT/absent-etc.diff"; then
  cat "$OUT/absent-etc.diff" >&2; die "state=absent left /etc different from before the install (see $OUT/absent-etc.diff)"
fi
# Debian never deletes the system account a package made (files may still be owned by it): the only
# account left may be nvidia-persistenced's (nvpd), and nothing else
comm -13 "$OUT/pristine.accounts" "$OUT/after-absent.accounts" >"$OUT/absent-accounts.diff"
comm -23 "$OUT/pristine.accounts" "$OUT/after-absent.accounts" | sed 's/^/removed /' >>"$OUT/absent-accounts.diff"
grep -qvxE '(user|group) nvpd' "$OUT/absent-accounts.diff" \
  && { cat "$OUT/absent-accounts.diff" >&2; die "state=absent left accounts other than nvidia-persistenced's (nvpd)"; }
absent2_s=$(play 6-absent-again -e driver_lab_phase=absent)
[ "$(recap 6-absent-again changed)" = 0 ] || die "second absent run changed something: see $OUT/6-absent-again.log"

total=$(( $(date +%s) - t0 ))
tee "$OUT/timings.txt" <<TXT
root_kernel=$KVER
host_kernel=$(uname -r)
bad_input_s=$bad_s
install_run_s=$install_s
dkms_build_s=${dkms_s:-unknown}
ccache=$ccache_stats
second_run_s=$again_s (changed=0)
check_mode_run_s=$check_s (changed=0)
guest_boot_to_ssh_s=$boot_s
guest_checks_s=$guest_s
absent_run_s=$absent_s
absent_again_s=$absent2_s (changed=0)
total_s=$total
TXT
log "native driver lane passed in ${total}s"
