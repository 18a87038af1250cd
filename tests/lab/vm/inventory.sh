#!/usr/bin/env bash
# Print a YAML inventory putting the running lane VMs in group vm_passthrough.
#   inventory.sh NAME... > hosts.yml
source "$(dirname "$0")/lib.sh"
echo "all:"
echo "  children:"
echo "    vm_passthrough:"
echo "      hosts:"
for name in "$@"; do
  d="$(vm_dir "$name")"
  cat <<YAML
        $name:
          ansible_host: 127.0.0.1
          ansible_port: $(cat "$d/ssh.port")
          ansible_user: root
          ansible_ssh_private_key_file: $VM_SSH_KEY
          ansible_ssh_common_args: -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR
          ansible_python_interpreter: /usr/bin/python3
YAML
done
cat <<'YAML'
      vars:
        gpu_workload: vm-passthrough
        # the stand-ins are qemu test devices, not NVIDIA functions
        discovery_require_gpu: false
        # edu 00:05.0 plays the GPU; its companion 00:05.1 is not an NVIDIA function,
        # so the lab must opt in to moving the whole group.
        vfio_devices: ["0000:00:05.0"]
        vfio_include_group_members: true
        gpu_reboot_allowed: true
        gpu_reboot_timeout: 900
        vfio_update_initramfs: false
YAML
