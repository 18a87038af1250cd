#!/usr/bin/env bash
# Wait until the VM answers SSH (default timeout 300 s under TCG). Prints the seconds taken.
source "$(dirname "$0")/lib.sh"
name="${1:?usage: wait-ssh.sh NAME [TIMEOUT]}"; timeout="${2:-300}"; valid_name "$name"
d="$(vm_dir "$name")"; port="$(cat "$d/ssh.port")"
start=$(date +%s)
# shellcheck disable=SC2046
while ! ssh $(ssh_opts) -p "$port" root@127.0.0.1 true 2>/dev/null; do
  if ! kill -0 "$(cat "$d/supervisor.pid" 2>/dev/null || echo 0)" 2>/dev/null; then
    tail -40 "$d/console.log" >&2 || true; die "$name: qemu is not running"
  fi
  if [ $(( $(date +%s) - start )) -ge "$timeout" ]; then
    tail -40 "$d/console.log" >&2 || true; die "$name: no SSH after ${timeout}s (console: $d/console.log)"
  fi
  sleep 2
done
echo $(( $(date +%s) - start ))
