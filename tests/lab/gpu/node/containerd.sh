#!/usr/bin/env bash
# containerd as a service on the GPU node lane's machine, which has no systemd:
#   containerd.sh start|stop|restart|status
# This is also the toolkit role's restart_command there (container_toolkit_restart_mode: command).
set -u
LANE_DIR=${GPU_LANE_DIR:-/tmp/gpuops-lane}
CONFIG=${CONTAINERD_CONFIG:-/etc/containerd/config.toml}
SOCK=/run/containerd/containerd.sock
PIDF=$LANE_DIR/run/containerd.pid
LOG=$LANE_DIR/logs/containerd.log
mkdir -p "$LANE_DIR/run" "$LANE_DIR/logs"

running() { [[ -f $PIDF ]] && kill -0 "$(cat "$PIDF")" 2>/dev/null; }

start() {
    running && return 0
    echo "--- start $(date -u +%FT%T.%NZ)" >>"$LOG"
    setsid /usr/local/bin/containerd --config "$CONFIG" >>"$LOG" 2>&1 </dev/null &
    echo $! >"$PIDF"
    for _ in $(seq 1 100); do
        if [[ -S $SOCK ]] && /usr/local/bin/ctr --address "$SOCK" version >/dev/null 2>&1; then return 0; fi
        running || { echo "containerd exited; see $LOG" >&2; tail -20 "$LOG" >&2; return 1; }
        sleep 0.1
    done
    echo "containerd did not answer on $SOCK in 10 s" >&2; return 1
}

stop() {
    running || { rm -f "$PIDF"; return 0; }
    local pid; pid=$(cat "$PIDF")
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$PIDF"
}

case ${1:-} in
start) start ;;
stop) stop ;;
restart) stop; start ;;
status) running ;;
*) echo "usage: $0 start|stop|restart|status" >&2; exit 2 ;;
esac
