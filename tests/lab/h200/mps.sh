#!/usr/bin/env bash
# CUDA MPS on the real GPU (issue 13, part 3): run ON the lent GPU machine, from the repository root,
# with .gpu-bundle/wheels (make gpu-bundle) and .collections (make install, with roles/mps_control)
# carried.  No systemd there: the role runs with mps_control_service_manager=none.
#
#   1. the GPU's settings (compute mode, MIG mode, persistence, ...) and the paths the role may touch, before
#   2. roles/mps_control present (with per-node limits): the daemon runs with the env file's settings and
#      reports the thread percentage it was given; rerun and check mode change nothing
#   3. two CUDA clients at once through MPS (plugins/module_utils/_cuda.py vectorAdd, --hold keeps each one's
#      context): while both run, the daemon's get_server_list / get_client_list and nvidia-smi's process
#      list (clients of type M+C, the server) are recorded and checked; both clients must pass
#   4. roles/mps_control absent: no MPS process, no pipe/log directory, no file of the role left; again: no change
#   5. the GPU's settings after == before (the compute mode above all: the role never sets it)
#
# Results under $RESULTS (default $OUT, else ./mps-lane-results): checks.tsv (name, PASS/FAIL, detail),
# summary.json, the logs.  Exit 0 only when every check passed.  A trap always stops the daemon and the
# clients.  Every step runs under `timeout`.
#
# Dry run on a machine without a GPU (stand-ins for nvidia-cuda-mps-control, nvidia-smi and libcuda; proves
# the plumbing, not MPS):
#   python3 tests/unit/mps_standin.py --install-launchers /tmp/mps-bin
#   mkdir -p /tmp/fakecuda && cc -shared -fPIC -o /tmp/fakecuda/libcuda.so.1 tests/unit/fixtures/cuda/fake_libcuda.c
#   PATH=/tmp/mps-bin:$PATH LD_LIBRARY_PATH=/tmp/fakecuda MPS_LANE_ROOT=/tmp/mps-dry \
#   MPS_ANSIBLE_PLAYBOOK=$PWD/.venv/bin/ansible-playbook MPS_COLLECTIONS=/path/to/collections \
#   RESULTS=/tmp/mps-dry-results bash tests/lab/h200/mps.sh
set -u
REPO=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$REPO" || exit 1
RESULTS=${RESULTS:-${OUT:-$REPO/mps-lane-results}}
LANE=${MPS_LANE_DIR:-/tmp/gpuops-mps-lane}
ROOT=${MPS_LANE_ROOT:-}             # dry runs: every path of the role under this directory
HOLD=${MPS_CLIENT_HOLD:-20}         # seconds each client keeps its context after its result
ELEMENTS=${MPS_CLIENT_ELEMENTS:-1000000}
AP_TIMEOUT=${MPS_AP_TIMEOUT:-300}
mkdir -p "$LANE" "$RESULTS" || exit 1
rm -f "$RESULTS"/checks.tsv "$RESULTS"/summary.json
exec > >(tee -a "$RESULTS/mps.log") 2>&1
T0=$(date +%s%3N)
elapsed() { local n; n=$(date +%s%3N); printf '%d.%03d' $(((n - T0) / 1000)) $(((n - T0) % 1000)); }
say() { printf '[mps %ss] %s\n' "$(elapsed)" "$*"; }
CHECKS=$RESULTS/checks.tsv
: >"$CHECKS"
check() { # check <name> <0 = pass> <detail>
    local r=FAIL
    [[ $2 == 0 ]] && r=PASS
    printf '%s\t%s\t%s\n' "$1" "$r" "${3//$'\t'/ }" >>"$CHECKS"
    say "CHECK $r $1 -- $3"
}

# the role's paths: its defaults on the GPU machine, under $ROOT in a dry run
PIPE=$ROOT/run/nvidia/mps/host/pipe
MLOG=$ROOT/run/nvidia/mps/host/log
SCRIPT=$ROOT/usr/local/sbin/gpuops-mps-control
ENVF=$ROOT/etc/gpuops/mps-control.env
WATCH_PATHS=("$ROOT/etc/gpuops" "$ENVF" "$SCRIPT" "$ROOT/run/nvidia" "$ROOT/run/nvidia/mps"
    "$ROOT/run/nvidia/mps/host" "$MLOG" "$PIPE")
# per-node limits too, to see them reach the daemon (harmless to a vectorAdd of a few MB)
ROLE_VARS=(-e mps_control_service_manager=none -e mps_control_active_thread_percentage=50
    -e mps_control_pinned_device_mem_limit=0=8G)
if [[ -n $ROOT ]]; then
    mkdir -p "$ROOT/etc" "$ROOT/usr/local/sbin" "$ROOT/run"
    ROLE_VARS+=(-e "mps_control_pipe_directory=$PIPE" -e "mps_control_log_directory=$MLOG"
        -e "mps_control_script_path=$SCRIPT" -e "mps_control_env_file=$ENVF"
        -e "mps_control_unit_path=$ROOT/etc/systemd/system/gpuops-mps-control.service")
fi

CLIENTS=()
cleanup() { # always: the clients, then the daemon (through the role's script, else directly)
    local p
    for p in "${CLIENTS[@]}"; do kill "$p" 2>/dev/null; done
    if [[ -x $SCRIPT && -r $ENVF ]]; then
        timeout 90 "$SCRIPT" stop >/dev/null 2>&1
    elif [[ -e $PIPE/control ]] && command -v nvidia-cuda-mps-control >/dev/null; then
        echo quit | CUDA_MPS_PIPE_DIRECTORY=$PIPE timeout 30 nvidia-cuda-mps-control >/dev/null 2>&1
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------------------------
say "ansible"
export ANSIBLE_COLLECTIONS_PATH=${MPS_COLLECTIONS:-$REPO/.collections} ANSIBLE_CONFIG=$REPO/ansible.cfg
export ANSIBLE_LOCALHOST_WARNING=false ANSIBLE_INVENTORY_UNPARSED_WARNING=false ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0
export ANSIBLE_PIPELINING=1 ANSIBLE_RETRY_FILES_ENABLED=0
if [[ -n ${MPS_ANSIBLE_PLAYBOOK:-} ]]; then
    AP=("$MPS_ANSIBLE_PLAYBOOK")
    APY=$(dirname "$MPS_ANSIBLE_PLAYBOOK")/python
else
    timeout 300 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$LANE/site" "$REPO"/.gpu-bundle/wheels/*.whl || { check ansible-install 1 "pip --target from .gpu-bundle/wheels failed"; exit 1; }
    export PYTHONPATH=$LANE/site
    APY=$(command -v python3)
    AP=("$APY" "$LANE/site/bin/ansible-playbook")
fi
[[ -f $ANSIBLE_COLLECTIONS_PATH/ansible_collections/gpuops/nvidia/roles/mps_control/tasks/main.yml ]]
rc=$?
check collection-has-mps-control $rc "$ANSIBLE_COLLECTIONS_PATH has gpuops.nvidia.mps_control (make install before carrying .collections)"
[[ $rc == 0 ]] || exit 1
cat >"$LANE/play.yml" <<'EOF'
- name: CUDA MPS control daemon (tests/lab/h200/mps.sh)
  hosts: localhost
  connection: local
  gather_facts: false
  roles:
    - role: gpuops.nvidia.mps_control
EOF
ap() { # ap <logname> [args...]: the role through ansible-playbook; rc of ansible-playbook
    local name=$1
    shift
    timeout "$AP_TIMEOUT" "${AP[@]}" -i localhost, "$LANE/play.yml" -e "ansible_python_interpreter=$APY" \
        "${ROLE_VARS[@]}" "$@" >"$RESULTS/$name.log" 2>&1
}
recap() { # recap <logname> <key>: the recap's count (changed, failed, ...)
    awk -v k="$2" '/^PLAY RECAP/{p=1;next} p{for(i=1;i<=NF;i++) if($i ~ "^"k"="){split($i,a,"="); s+=a[2]}} END{print s+0}' "$RESULTS/$1.log"
}

# ---------------------------------------------------------------------------------------------
say "the node and the GPU's settings before"
SETTINGS_Q=uuid,name,pci.bus_id,driver_version,compute_mode,mig.mode.current,mig.mode.pending,persistence_mode,ecc.mode.current,power.limit,clocks.applications.graphics,clocks.applications.memory
timeout 60 nvidia-smi --query-gpu=$SETTINGS_Q --format=csv,noheader >"$RESULTS/gpu-settings-before.csv" 2>&1
check nvidia-smi-before $? "$(head -1 "$RESULTS/gpu-settings-before.csv")"
timeout 60 nvidia-smi --query-gpu=index,uuid,compute_mode --format=csv,noheader >"$RESULTS/compute-mode-before.csv" 2>&1
MPS_BIN=$(command -v nvidia-cuda-mps-control)
for c in /usr/bin/nvidia-cuda-mps-control /usr/local/nvidia/bin/nvidia-cuda-mps-control; do
    [[ -z $MPS_BIN && -x $c ]] && MPS_BIN=$c
done
[[ -n $MPS_BIN ]]
check mps-binary-present $? "nvidia-cuda-mps-control: ${MPS_BIN:-not found}"
{
    uname -a
    timeout 60 nvidia-smi -L
    ls -la "$(dirname "${MPS_BIN:-/usr/bin/x}")"/nvidia-cuda-mps-* 2>&1
} >"$RESULTS/node-info.txt" 2>&1
mps_procs() { ps -eo pid=,comm=,args= | awk '$2 ~ /^nvidia-cuda-mps/'; }
paths_state() { local p; for p in "${WATCH_PATHS[@]}"; do if [[ -e $p ]]; then echo "present $p"; else echo "absent $p"; fi; done; }
paths_state >"$RESULTS/paths-before.txt"
ls -1 /dev/shm >"$RESULTS/dev-shm-before.txt" 2>/dev/null
before_procs=$(mps_procs)
[[ -z $before_procs ]]
check no-mps-before $? "${before_procs:-no nvidia-cuda-mps process before the run}"

# ---------------------------------------------------------------------------------------------
say "the role, state present (service_manager none)"
ap present; rc=$?
check role-present $rc "rc=$rc changed=$(recap present changed)"
status=$(timeout 60 "$SCRIPT" status 2>&1); rc=$?
check daemon-running $rc "$status"
cp "$ENVF" "$RESULTS/mps-control.env" 2>/dev/null
DPID=$(cat "$PIPE/nvidia-cuda-mps-control.pid" 2>/dev/null)
[[ -z $DPID ]] && DPID=$(mps_procs | awk '{print $1}' | head -1)
denv=$(tr '\0' '\n' <"/proc/${DPID:-0}/environ" 2>/dev/null | sort)
printf '%s\n' "$denv" >"$RESULTS/daemon-environ.txt"
want=$(grep -E '^CUDA_' "$ENVF" 2>/dev/null | sort)
[[ -n $want && $(printf '%s\n' "$denv" | grep -E '^CUDA_') == "$want" ]]
check daemon-has-the-env-file-settings $? "daemon pid ${DPID:-?}: $(printf '%s\n' "$denv" | grep -E '^CUDA_' | tr '\n' ' ')"
mpsq() { printf '%s\n' "$1" | CUDA_MPS_PIPE_DIRECTORY=$PIPE timeout 15 "${MPS_BIN:-nvidia-cuda-mps-control}" 2>&1; }
thr=$(mpsq get_default_active_thread_percentage)
{
    echo "# get_default_active_thread_percentage"
    echo "$thr"
    echo "# get_default_device_pinned_mem_limit 0"
    mpsq "get_default_device_pinned_mem_limit 0"
} >"$RESULTS/mps-limits.txt"
awk 'NR == 1 && $1 + 0 == 50 { ok = 1 } END { exit !ok }' <<<"$thr"
check daemon-thread-percentage-50 $? "get_default_active_thread_percentage: $thr (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 from the env file)"
ap present-again; rc=$?
c=$(recap present-again changed)
[[ $rc == 0 && $c == 0 ]]
check role-rerun-changed-0 $? "rc=$rc changed=$c"
ap present-check --check --diff; rc=$?
c=$(recap present-check changed)
[[ $rc == 0 && $c == 0 ]]
check role-check-mode-changed-0 $? "rc=$rc changed=$c"
[[ $(cat "$PIPE/nvidia-cuda-mps-control.pid" 2>/dev/null) == "$DPID" ]]
check daemon-untouched-by-reruns $? "still pid $DPID"

# ---------------------------------------------------------------------------------------------
say "two CUDA clients at once through MPS (vectorAdd, $ELEMENTS elements, context held ${HOLD}s)"
for i in 1 2; do
    CUDA_MPS_PIPE_DIRECTORY=$PIPE python3 plugins/module_utils/_cuda.py --elements "$ELEMENTS" --hold "$HOLD" \
        >"$RESULTS/client-$i.out" 2>"$RESULTS/client-$i.err" &
    CLIENTS+=($!)
done
say "clients ${CLIENTS[*]}"
ready() { grep -q 'holding the context' "$RESULTS/client-1.err" && grep -q 'holding the context' "$RESULTS/client-2.err"; }
alive() { kill -0 "${CLIENTS[0]}" 2>/dev/null && kill -0 "${CLIENTS[1]}" 2>/dev/null; }
for _ in $(seq 1 600); do
    ready && break
    alive || break
    sleep 0.1
done
ready
check clients-both-holding $? "both clients computed and hold their contexts: $(cat "$RESULTS"/client-*.err | tr '\n' ' ')"
servers=$(mpsq get_server_list)
{
    echo "# get_server_list"
    echo "$servers"
} >"$RESULTS/mps-observed.txt"  # (mps-limits.txt: the limits read back earlier)
clients_seen=''
for s in $servers; do
    [[ $s =~ ^[0-9]+$ ]] || continue
    cl=$(mpsq "get_client_list $s")
    printf '# get_client_list %s\n%s\n' "$s" "$cl" >>"$RESULTS/mps-observed.txt"
    clients_seen="$clients_seen $cl"
done
timeout 60 nvidia-smi >"$RESULTS/nvidia-smi-during.txt" 2>&1
timeout 60 nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader >"$RESULTS/compute-apps-during.csv" 2>&1
mps_procs >"$RESULTS/mps-processes-during.txt"
server=$(printf '%s\n' "$servers" | grep -E '^[0-9]+$' | head -1)
[[ -n $server && $(printf '%s\n' "$servers" | grep -cE '^[0-9]+$') == 1 ]]
# shellcheck disable=SC2086 # one word per pid
check mps-one-server $? "get_server_list: $(printf '%s ' $servers)"
both=0
# shellcheck disable=SC2086 # one word per pid
seen=" $(printf '%s ' $clients_seen)"
for p in "${CLIENTS[@]}"; do [[ $seen == *" $p "* ]] || both=1; done
check mps-both-clients-listed $both "get_client_list ${server:-?}:$seen(clients ${CLIENTS[*]})"
smi_mc=0
for p in "${CLIENTS[@]}"; do
    grep -E "^\|.*[[:space:]]${p}[[:space:]]+M\+C[[:space:]]" "$RESULTS/nvidia-smi-during.txt" >/dev/null || smi_mc=1
done
check nvidia-smi-clients-type-m-c $smi_mc "$(grep -E 'M\+C' "$RESULTS/nvidia-smi-during.txt" | tr -s ' ' | tr '\n' ';')"
grep -qE "[[:space:]]${server:-none}[[:space:]]" "$RESULTS/nvidia-smi-during.txt" || grep -q "^${server:-none}," "$RESULTS/compute-apps-during.csv"
check nvidia-smi-shows-the-server $? "server ${server:-none}: $(grep -E "[[:space:]]${server:-none}[[:space:]]|mps-server" "$RESULTS/nvidia-smi-during.txt" | tr -s ' ' | head -2 | tr '\n' ';')"
say "waiting for the clients"
crc=()
for p in "${CLIENTS[@]}"; do
    for _ in $(seq 1 $(((HOLD + 120) * 10))); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill "$p" 2>/dev/null
    wait "$p"
    crc+=($?)
done
CLIENTS=()
pass=0
for i in 1 2; do
    [[ ${crc[$((i - 1))]} == 0 ]] && grep -q ' 0 mismatches' "$RESULTS/client-$i.out" &&
        grep -q '"ok": true' "$RESULTS/client-$i.out" || pass=1
done
check clients-pass $pass "rc ${crc[*]}: $(head -1 "$RESULTS/client-1.out") / $(head -1 "$RESULTS/client-2.out")"
cp "$MLOG"/*.log "$RESULTS/" 2>/dev/null
grep -q 'Active Threads Percentage set to 50' "$RESULTS/server.log" 2>/dev/null
check server-thread-percentage-50 $? "server.log: $(grep -h 'Active Threads Percentage' "$RESULTS/server.log" 2>/dev/null | head -1)"

# ---------------------------------------------------------------------------------------------
say "the role, state absent"
ap absent -e mps_control_state=absent; rc=$?
check role-absent $rc "rc=$rc changed=$(recap absent changed)"
sleep 1
left=$(mps_procs)
[[ -z $left ]]
check no-mps-process-left $? "${left:-none}"
[[ ! -e $PIPE && ! -e $MLOG ]]
check pipe-and-log-dirs-gone $? "$PIPE $MLOG"
paths_state >"$RESULTS/paths-after.txt"
diff -u "$RESULTS/paths-before.txt" "$RESULTS/paths-after.txt" >"$RESULTS/paths.diff"
check paths-as-before $? "$(grep '^[-+][ap]' "$RESULTS/paths.diff" | tr '\n' ' ')"
ls -1 /dev/shm >"$RESULTS/dev-shm-after.txt" 2>/dev/null
new_shm=$(comm -13 "$RESULTS/dev-shm-before.txt" "$RESULTS/dev-shm-after.txt" | tr '\n' ' ')
[[ -z $new_shm ]]
check dev-shm-nothing-left $? "${new_shm:-no new /dev/shm entries}"
ap absent-again -e mps_control_state=absent; rc=$?
c=$(recap absent-again changed)
[[ $rc == 0 && $c == 0 ]]
check role-absent-again-changed-0 $? "rc=$rc changed=$c"

# ---------------------------------------------------------------------------------------------
timeout 60 nvidia-smi --query-gpu=$SETTINGS_Q --format=csv,noheader >"$RESULTS/gpu-settings-after.csv" 2>&1
cmp -s "$RESULTS/gpu-settings-before.csv" "$RESULTS/gpu-settings-after.csv"
check gpu-settings-unchanged $? "$(cat "$RESULTS/gpu-settings-after.csv")"
timeout 60 nvidia-smi --query-gpu=index,uuid,compute_mode --format=csv,noheader >"$RESULTS/compute-mode-after.csv" 2>&1
cmp -s "$RESULTS/compute-mode-before.csv" "$RESULTS/compute-mode-after.csv"
check compute-mode-unchanged $? "$(tr '\n' ' ' <"$RESULTS/compute-mode-after.csv")"

# ---------------------------------------------------------------------------------------------
fails=$(awk -F'\t' '$2 == "FAIL"' "$CHECKS" | wc -l)
total=$(wc -l <"$CHECKS")
"${APY:-python3}" - "$CHECKS" "$RESULTS/summary.json" "$(elapsed)" "$(head -1 "$RESULTS/gpu-settings-before.csv")" \
    "${MPS_BIN:-}" "${ROOT:-}" <<'EOF'
import datetime, json, sys
checks_path, out, wall, gpu, mps_bin, root = sys.argv[1:7]
rows = [line.rstrip("\n").split("\t", 2) for line in open(checks_path) if line.strip()]
summary = {
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "gpu": gpu, "nvidia_cuda_mps_control": mps_bin, "dry_run_root": root or None, "wall_s": float(wall),
    "checks": len(rows), "failed": [r[0] for r in rows if r[1] != "PASS"],
    "results": {r[0]: {"result": r[1], "detail": r[2] if len(r) > 2 else ""} for r in rows},
}
json.dump(summary, open(out, "w"), indent=1, sort_keys=True)
EOF
say "checks: $total, failed: $fails"
cat "$CHECKS"
[[ $fails == 0 ]]
