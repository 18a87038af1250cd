#!/usr/bin/env bash
# Start a lane VM from the cached base image (copy-on-write overlay, base untouched).
#   start.sh NAME     -> state in $VM_STATE/NAME (pidfile, ssh port, serial console log)
#   VM_IMAGE=PATH     boot another raw image (e.g. the driver lane's) instead of the base image
# Guest: q35 + emulated Intel IOMMU (intremap), TCG, std VGA (the boot VGA device), and
# GPU stand-ins:
#   00:05.0 edu (plays the GPU)  + 00:05.1 pci-testdev (its "audio" companion): one IOMMU group
#   00:06.0 edu (a second, identical "GPU") in its own group: must stay untouched.
#   00:07.0 NVMe controller with SR-IOV (4 VFs at 00:07.1-00:07.4 once enabled): real virtual functions for
#           gpuops.nvidia.sriov_vfs (qemu's nvme needs an NVM subsystem and flexible queue/interrupt resources
#           for SR-IOV: sriov_vq_flexible >= 2 x VFs, sriov_vi_flexible >= VFs; the VFs stay offline NVMe
#           controllers unless nvme-cli virt-mgmt assigns them resources, which the lane does not need).
source "$(dirname "$0")/lib.sh"
name="${1:?usage: start.sh NAME}"
valid_name "$name"
d="$(vm_dir "$name")"
image="${VM_IMAGE:-$VM_BASE_IMAGE}"
[ -f "$image" ] || die "no image $image: run build-image.sh first"
if [ -f "$d/supervisor.pid" ] && kill -0 "$(cat "$d/supervisor.pid")" 2>/dev/null; then
  log "$name already running (supervisor pid $(cat "$d/supervisor.pid"))"; exit 0
fi
rm -rf "$d"; mkdir -p "$d"
qemu-img create -q -f qcow2 -F raw -b "$image" "$d/disk.qcow2"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
echo "$port" >"$d/ssh.port"
echo "${VM_RUN_ID:-}" >"$d/run_id"
accel="${VM_ACCEL:-tcg}"  # TCG: KVM is not dependable on the lane hosts
# Guest reboots: a warm reset of this machine (TCG, q35, intel-iommu) hangs after GRUB on qemu 7.2,
# so qemu runs with -no-reboot and a small supervisor cold-starts it again (same disk, same SSH
# port) whenever the guest kernel said "Restarting system".  Guest power-off ends the VM.
qemu_cmd=(qemu-system-x86_64
  -name "gpuops-$name" -machine q35,kernel-irqchip=split,accel="$accel" -cpu max -smp "${VM_SMP:-1}" -m "$VM_MEM"
  -device intel-iommu,intremap=on
  -drive file="$d/disk.qcow2",if=none,id=d0,format=qcow2,cache=unsafe -device virtio-blk-pci,drive=d0
  -netdev user,id=n0,hostfwd=tcp:127.0.0.1:"$port"-:22 -device virtio-net-pci,netdev=n0
  -device edu,addr=05.0,multifunction=on -device pci-testdev,addr=05.1
  -device edu,addr=06.0
  -device nvme-subsys,id=nvmesubsys0,nqn=gpuops-sriov
  -device nvme,serial=gpuopssriov,subsys=nvmesubsys0,addr=07.0,sriov_max_vfs=4,sriov_vq_flexible=8,sriov_vi_flexible=4
  -vga std -display none -monitor none
  -chardev file,id=con0,path="$d/console.log",append=on -serial chardev:con0
  -no-reboot)
printf '%q ' "${qemu_cmd[@]}" >"$d/qemu.cmd"
supervise() {
  trap 'kill "$(cat "$d/qemu.pid" 2>/dev/null)" 2>/dev/null; exit 0' TERM INT
  local boots=0
  while :; do
    boots=$((boots + 1))
    "${qemu_cmd[@]}" 2>>"$d/qemu.err" &
    echo $! >"$d/qemu.pid"
    wait $! || { echo "qemu exited with $? (boot $boots)" >>"$d/qemu.err"; break; }
    [ -e "$d/stop" ] && break
    tail -c 4096 "$d/console.log" | tr -d '\r' | grep -q 'reboot: Restarting system' || break
    : >>"$d/console.log"
    echo "$(date -u +%H:%M:%S) guest reboot -> cold start $((boots + 1))" >>"$d/supervisor.log"
  done
  rm -f "$d/qemu.pid"
}
supervise </dev/null >/dev/null 2>&1 &
echo $! >"$d/supervisor.pid"
sleep 1
kill -0 "$(cat "$d/supervisor.pid")" 2>/dev/null && [ -s "$d/qemu.pid" ] || { cat "$d/qemu.err" >&2; die "qemu failed to start"; }
log "$name started: pid $(cat "$d/qemu.pid"), ssh 127.0.0.1:$port, console $d/console.log ($accel)"
