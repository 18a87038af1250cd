#!/usr/bin/env bash
# VM-lane proof for roles/driver: a real Debian bookworm guest (qemu TCG, no GPU) gets Debian's
# non-free nvidia-driver 535 through the role; DKMS builds the module for the guest kernel.
#   1. install (timed; DKMS build time read from the guest's make.log)
#   2. the same run again must change nothing
#   3. check mode against the installed guest must change nothing
#   4. state=absent removes the packages and lifts the holds; then absent again changes nothing
# Uses tests/lab/vm/ (image build, start, wait, stop) without changing it.  Logs: .lab/driver/
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
VM="$REPO/tests/lab/vm"
source "$VM/lib.sh"
NAME="${DRIVER_VM_NAME:-drvvm}"
OUT="${DRIVER_LAB_OUT:-$REPO/.lab/driver}"
BIN="${BIN:-$REPO/.venv/bin}"
KEEP="${DRIVER_VM_KEEP:-0}"
mkdir -p "$OUT"
# A private copy of the built collection: a concurrent `make install` (rm -rf + install) must not pull
# modules from under a run that lasts many minutes.
TARBALL="$(ls -t "$REPO"/build/gpuops-nvidia-*.tar.gz | head -1)"
rm -rf "$OUT/collections"
"$BIN/ansible-galaxy" collection install --force --no-deps -p "$OUT/collections" "$TARBALL" >/dev/null
export ANSIBLE_COLLECTIONS_PATH="$OUT/collections"
export ANSIBLE_HOST_KEY_CHECKING=False ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0

stop_vm() { [ "$KEEP" = 1 ] || "$VM/stop.sh" "$NAME" >/dev/null 2>&1 || true; }
trap stop_vm EXIT

t0=$(date +%s)
"$VM/build-image.sh" >/dev/null
"$VM/start.sh" "$NAME"
boot=$("$VM/wait-ssh.sh" "$NAME" 600)
port="$(cat "$(vm_dir "$NAME")/ssh.port")"
cat >"$OUT/hosts.yml" <<YAML
all:
  hosts:
    $NAME:
      ansible_host: 127.0.0.1
      ansible_port: $port
      ansible_user: root
      ansible_ssh_private_key_file: $VM_SSH_KEY
      ansible_ssh_common_args: -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o ServerAliveInterval=30
      ansible_python_interpreter: /usr/bin/python3
YAML
# shellcheck disable=SC2046
gssh() { ssh $(ssh_opts) -p "$port" root@127.0.0.1 "$@"; }

play() {  # play LOGNAME [ansible-playbook args...] -> prints seconds; log in $OUT/LOGNAME.log
  local log="$OUT/$1.log"; shift
  local s; s=$(date +%s)
  if ! "$BIN/ansible-playbook" -i "$OUT/hosts.yml" "$HERE/vm.yml" "$@" >"$log" 2>&1; then
    tail -60 "$log" >&2; die "ansible-playbook failed, see $log"
  fi
  echo $(( $(date +%s) - s ))
}
recap_changed() { sed -n 's/.* changed=\([0-9]*\) .*/\1/p' "$OUT/$1.log" | tail -1; }

# Host-side package cache: the .deb files of the previous run are copied into the guest's apt
# archive before the role runs (apt checks each against the freshly updated index and downloads
# what is missing or stale), and the guest's archive is copied back afterwards.
DEB_CACHE="${DRIVER_DEB_CACHE:-$VM_CACHE/apt-archives-$DEBIAN_SUITE}"
mkdir -p "$DEB_CACHE"
seeded=$(find "$DEB_CACHE" -maxdepth 1 -name '*.deb' | wc -l)
if [ "$seeded" -gt 0 ]; then
  (cd "$DEB_CACHE" && tar -cf - ./*.deb) | gssh 'tar -C /var/cache/apt/archives -xf -'
fi
log "guest up after ${boot}s ($seeded cached packages seeded); run 1: install nvidia-driver 535 with DKMS (TCG: slow)"
install_s=$(play 1-install -e driver_lab_phase=present)
gssh 'cd /var/cache/apt/archives && tar -cf - *.deb' | tar -C "$DEB_CACHE" -xf - || log "could not copy the guest's packages back (cache not updated)"
dkms_s=$(gssh 'log=$(ls /var/lib/dkms/nvidia-current/*/build/make.log 2>/dev/null | head -1); [ -n "$log" ] || exit 0;
  start=$(date -d "$(sed -n 2p "$log")" +%s); end=$(stat -c %Y "$log"); echo $((end - start))' || true)
log "run 2: the same again must change nothing"
again_s=$(play 2-again -e driver_lab_phase=present)
[ "$(recap_changed 2-again)" = 0 ] || die "second run changed $(recap_changed 2-again) task(s): see $OUT/2-again.log"
log "run 3: check mode against the installed guest"
check_s=$(play 3-check -e driver_lab_phase=present --check)
[ "$(recap_changed 3-check)" = 0 ] || die "check mode reported $(recap_changed 3-check) change(s): see $OUT/3-check.log"
log "run 4: state=absent"
absent_s=$(play 4-absent -e driver_lab_phase=absent)
absent2_s=$(play 5-absent-again -e driver_lab_phase=absent)
[ "$(recap_changed 5-absent-again)" = 0 ] || die "second absent run changed something: see $OUT/5-absent-again.log"
total=$(( $(date +%s) - t0 ))
tee "$OUT/timings.txt" <<TXT
boot_to_ssh_s=$boot
cached_debs_seeded=$seeded
install_run_s=$install_s
dkms_build_s=${dkms_s:-unknown}
second_run_s=$again_s (changed=0)
check_mode_run_s=$check_s (changed=0)
absent_run_s=$absent_s
absent_again_s=$absent2_s (changed=0)
total_s=$total
TXT
log "driver VM lane passed in ${total}s"
