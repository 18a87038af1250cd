#!/usr/bin/env bash
# Stop lane VMs by name. Never leaves qemu behind; keeps logs unless --purge.  Only kills
# the pid recorded in our own pidfile, after checking it really is our qemu.
# --all stops every VM started under the same $VM_RUN_ID (set by `make test-vm`), so runs of
# other people sharing this checkout's .lab/vm are never touched; without VM_RUN_ID it does nothing.
source "$(dirname "$0")/lib.sh"
purge=0; names=()
for a in "$@"; do
  case "$a" in
    --purge) purge=1 ;;
    --all)
      if [ -z "${VM_RUN_ID:-}" ]; then log "--all without VM_RUN_ID: nothing stopped (name the VMs)"; continue; fi
      for p in "$VM_STATE"/*/run_id; do
        [ -f "$p" ] && [ "$(cat "$p")" = "$VM_RUN_ID" ] && names+=("$(basename "$(dirname "$p")")")
      done ;;
    *) names+=("$a") ;;
  esac
done
for name in "${names[@]+"${names[@]}"}"; do
  valid_name "$name"
  d="$(vm_dir "$name")"
  [ -d "$d" ] || continue
  touch "$d/stop"
  if [ -f "$d/supervisor.pid" ]; then
    spid="$(cat "$d/supervisor.pid")"
    # our supervisor is a bash child of start.sh; only signal it if it still is one
    if kill -0 "$spid" 2>/dev/null && grep -qa 'start.sh' "/proc/$spid/cmdline" 2>/dev/null; then kill "$spid" 2>/dev/null || true; fi
    rm -f "$d/supervisor.pid"
  fi
  if [ -f "$d/qemu.pid" ]; then
    pid="$(cat "$d/qemu.pid")"
    if kill -0 "$pid" 2>/dev/null && grep -qa "gpuops-$name" "/proc/$pid/cmdline" 2>/dev/null; then
      kill "$pid"
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
      log "$name stopped (qemu pid $pid)"
    fi
    rm -f "$d/qemu.pid"
  fi
  rm -f "$d/disk.qcow2"
  [ "$purge" = 1 ] && rm -rf "$d"
done
exit 0
