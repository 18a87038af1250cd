#!/usr/bin/env bash
# The GPU node lane: run ON the lent GPU machine (make test-gpu), from the repository root, with
# .gpu-bundle (make gpu-bundle) and .collections (make install) carried.  It unpacks the bundle,
# starts what it needs itself (the machine has no systemd), turns the machine into a GPU node through
# playbooks/site.yml, proves pods get the GPU through NVIDIA's own device plugin and a standalone
# kubelet, compares NVIDIA's gpu-feature-discovery labels with ours, runs the validator's node checks
# and the doctor, uninstalls, stops every daemon it started and writes its results under $RESULTS
# (default $OUT, else ./gpu-lane-results).  Exit status 0 only when every check passed.
#
# It never changes the GPU's settings (MIG, compute mode, clocks, power, persistence, ECC), never
# resets it and never touches the driver: the settings are read before and after and compared.
set -u
REPO=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$REPO"
BUNDLE=${GPU_LANE_BUNDLE:-$REPO/.gpu-bundle}
export GPU_LANE_DIR=${GPU_LANE_DIR:-/tmp/gpuops-lane}
export GPU_LANE_BUNDLE=$BUNDLE
LANE=$GPU_LANE_DIR
RESULTS=${RESULTS:-${OUT:-$REPO/gpu-lane-results}}
RES=$LANE/results
INV=tests/lab/h200/hosts.yml
STEP_TIMEOUT=${STEP_TIMEOUT:-90}
mkdir -p "$LANE"/{bin,logs,run,dp,pods} "$RES" "$RESULTS"
LOG=$RES/lane.log
exec > >(tee -a "$LOG") 2>&1
T0=$(date +%s%3N)
elapsed() { local n; n=$(date +%s%3N); printf '%d.%03d' $(((n - T0) / 1000)) $(((n - T0) % 1000)); }

source tests/lab/gpu/node/kube.sh
trap 'lane_stop_all >/dev/null 2>&1' EXIT

CHECKS=$RES/checks.tsv
: >"$CHECKS"
say() { printf '[gpu-lane %ss] %s\n' "$(elapsed)" "$*"; }
check() {  # check <name> <0|1 ok> <detail>
    local r=FAIL; [[ $2 == 0 ]] && r=PASS
    printf '%s\t%s\t%s\n' "$1" "$r" "$3" >>"$CHECKS"
    say "CHECK $r $1 -- $3"
}

# ---------------------------------------------------------------------------------------------
say "unpack the bundle ($(du -sh "$BUNDLE" | cut -f1))"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$LANE/site" "$BUNDLE"/wheels/*.whl || exit 1
export PYTHONPATH=$LANE/site PATH=$LANE/site/bin:/usr/local/bin:$PATH
export ANSIBLE_COLLECTIONS_PATH=$REPO/.collections:$BUNDLE/collections ANSIBLE_CONFIG=$REPO/ansible.cfg
export ANSIBLE_LOCALHOST_WARNING=false ANSIBLE_INVENTORY_UNPARSED_WARNING=false ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0
PY=$(command -v python3)
xz -dc "$BUNDLE/bin.tar.xz" | tar -C "$LANE/bin" -xf - || exit 1
# the node's container stack, where a distribution would put it
for b in containerd ctr containerd-shim-runc-v2 runc kubelet; do install -m 0755 "$LANE/bin/$b" /usr/local/bin/$b; done
install -m 0755 tests/lab/gpu/node/containerd.sh "$LANE/containerd.sh"
cat "$BUNDLE/versions.txt"
{ uname -a; cat /etc/os-release; nvidia-smi; ls -la /usr/local/nvidia/bin /usr/local/nvidia/lib64 | head -60; ldconfig -p | grep -E 'libcuda|libnvidia-ml'; } >"$RES/node-info.txt" 2>&1
command -v xz >/dev/null || echo "note: no xz on the node"

SETTINGS_Q=uuid,name,pci.bus_id,driver_version,mig.mode.current,mig.mode.pending,compute_mode,persistence_mode,ecc.mode.current,power.limit,clocks.applications.graphics,clocks.applications.memory
nvidia-smi --query-gpu=$SETTINGS_Q --format=csv,noheader >"$RES/gpu-settings-before.csv"
UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
say "GPU $UUID: $(cat "$RES/gpu-settings-before.csv")"

ap() {  # ap <logname> <playbook> [args...]: ansible-playbook against the node's inventory
    local name=$1; shift
    local t; t=$(date +%s%3N)
    timeout 240 "$PY" "$LANE/site/bin/ansible-playbook" -i "$INV" "$@" >"$RES/$name.log" 2>&1
    local rc=$?
    printf '%s\t%s\t%s ms\n' "$name" "$rc" "$(($(date +%s%3N) - t))" >>"$RES/playbook-times.tsv"
    return $rc
}
recap_changed() { awk '/^PLAY RECAP/{p=1;next} p && /changed=/{for(i=1;i<=NF;i++) if($i ~ /^changed=/){split($i,a,"="); s+=a[2]}} END{print s+0}' "$RES/$1.log"; }
recap_failed() { awk '/^PLAY RECAP/{p=1;next} p && /failed=/{for(i=1;i<=NF;i++) if($i ~ /^(failed|unreachable)=/){split($i,a,"="); s+=a[2]}} END{print s+0}' "$RES/$1.log"; }

# ---------------------------------------------------------------------------------------------
say "the user's containerd config (version 3), containerd started, the pod image made and imported"
mkdir -p /etc/containerd
cp tests/lab/gpu/node/containerd-config.toml /etc/containerd/config.toml
cp /etc/containerd/config.toml "$RES/containerd-config.before.toml"
"$LANE/containerd.sh" start || { check containerd-start 1 "see logs/containerd.log"; }
"$PY" tests/lab/gpu/node/mkimage.py --name gpuops.local/node-check:lane --pause "$LANE/bin/pause" \
    --busybox "$LANE/bin/busybox" --cuda-check plugins/module_utils/_cuda.py --out "$LANE/image.tar" \
    --libs-for $(ls /usr/local/nvidia/lib64/libcuda.so.1 /usr/local/nvidia/lib64/libnvidia-ml.so.1 /usr/local/nvidia/bin/nvidia-smi \
                  /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/bin/nvidia-smi 2>/dev/null)
ctr -n k8s.io images import "$LANE/image.tar" && ctr -n k8s.io images ls -q | grep -q node-check
check image-import $? "pod image from the host's files, imported with ctr images import"

# ---------------------------------------------------------------------------------------------
say "site.yml, first run"
ap site-1 playbooks/site.yml; rc=$?
check site-first-run $rc "rc=$rc changed=$(recap_changed site-1)"
grep -E 'Cluster components NOT applied|READY|nvidia-container-runtime' "$RES/site-1.log" | head -5
say "site.yml, second run (must change nothing)"
ap site-2 playbooks/site.yml; rc=$?
c=$(recap_changed site-2)
[[ $rc == 0 && $c == 0 ]]; check site-second-run-changed-0 $? "rc=$rc changed=$c"
drv_changed=$(awk '/^PLAY \[/{p=/NVIDIA driver/} p && /^changed:/' "$RES/site-1.log" | wc -l)
grep -A3 'driver.*Say why packages are left alone' "$RES/site-1.log" | grep -q 'left alone' && [[ $drv_changed == 0 ]]
check driver-left-alone $? "driver role on the first run: installed driver verified, packages left alone, $drv_changed changed"
cp /etc/containerd/config.toml "$RES/containerd-config.after-site.toml"
cp /etc/cdi/nvidia.yaml "$RES/cdi-nvidia.yaml" 2>/dev/null
cp /etc/nvidia-container-runtime/config.toml "$RES/nvidia-container-runtime-config.toml" 2>/dev/null
diff -u "$RES/containerd-config.before.toml" "$RES/containerd-config.after-site.toml" >"$RES/containerd-config.diff"

# gpu_facts' UUID (what the cluster would be told)
ap labels tests/lab/h200/labels.yml -e dest="$RES/labels-ours.json"
FACTS_UUID=$("$PY" - "$RES/site-1.log" <<'EOF'
import re, sys
m = re.findall(r"GPU-[0-9a-f-]{36}", open(sys.argv[1]).read())
print(m[0] if m else "")
EOF
)
[[ -n $FACTS_UUID ]] || FACTS_UUID=$UUID

# ---------------------------------------------------------------------------------------------
say "containers with the GPU through CDI (ctr) and through nvidia-container-runtime (cdi mode)"
timeout $STEP_TIMEOUT ctr -n k8s.io run --rm --device nvidia.com/gpu=all gpuops.local/node-check:lane cdi-all \
    /bin/sh -c 'nvidia-smi -L; python3 /check/_cuda.py' >"$RES/container-cdi-all.txt" 2>&1
rc=$?; cat "$RES/container-cdi-all.txt"
[[ $rc == 0 ]] && grep -q "$FACTS_UUID" "$RES/container-cdi-all.txt"
check container-cdi-nvidia-smi $? "ctr --device nvidia.com/gpu=all: nvidia-smi -L prints gpu_facts' UUID $FACTS_UUID (rc=$rc)"
timeout $STEP_TIMEOUT ctr -n k8s.io run --rm --runc-binary /usr/local/bin/nvidia-container-runtime \
    --env NVIDIA_VISIBLE_DEVICES="$FACTS_UUID" gpuops.local/node-check:lane nvrt \
    /bin/sh -c 'nvidia-smi -L' >"$RES/container-nvidia-runtime.txt" 2>&1
rc=$?; cat "$RES/container-nvidia-runtime.txt"
[[ $rc == 0 ]] && grep -q "$FACTS_UUID" "$RES/container-nvidia-runtime.txt"
check container-nvidia-runtime $? "nvidia-container-runtime (mode cdi) with NVIDIA_VISIBLE_DEVICES=<uuid> (rc=$rc)"

# ---------------------------------------------------------------------------------------------
say "labels: NVIDIA's gpu-feature-discovery --oneshot beside ours"
ap dp-configs tests/lab/h200/device_plugin_configs.yml -e dest="$LANE/dp"
cp "$LANE"/dp/*.yaml "$RES/" 2>/dev/null
for cfg in default timeslice4; do
    timeout 60 "$LANE/bin/gpu-feature-discovery" --oneshot --config-file "$LANE/dp/$cfg.yaml" \
        --output-file "$RES/labels-gfd-$cfg.txt" >"$RES/gfd-$cfg.log" 2>&1
done
ap labels-ts tests/lab/h200/labels.yml -e dest="$RES/labels-ours-timeslice4.json" -e lane_sharing_config=timeslice4
"$PY" tests/lab/gpu/compare_labels.py --gfd "$RES/labels-gfd-default.txt" --ours "$RES/labels-ours.json" \
    --out "$RES/labels-compare-default.json" \
    --ignore nvidia.com/gpu.present
check labels-equal-gfd $? "every nvidia.com/* label of gpu-feature-discovery equals ours (no sharing; gpu.present is the operator's label, not GFD's)"
"$PY" tests/lab/gpu/compare_labels.py --gfd "$RES/labels-gfd-timeslice4.txt" --ours "$RES/labels-ours-timeslice4.json" \
    --out "$RES/labels-compare-timeslice4.json" \
    --ignore nvidia.com/gpu.present
check labels-equal-gfd-timeslicing $? "same with the time-slicing config (replicas 4)"

# ---------------------------------------------------------------------------------------------
say "kubelet (standalone, static pods) and NVIDIA's device plugin"
kubelet_start
dp_start default
wait_capacity 1; rc=$?
kubelet_view >"$RES/kubelet-capacity-default.json"
check kubelet-capacity-1 $rc "kubelet's registered nvidia.com/gpu devices: $(cat "$RES/kubelet-capacity-default.json")"
pod_make gpu-check 0 >/etc/kubernetes/manifests/gpu-check.yaml
wait_pods_done gpu-check; rc=$?
pod_log gpu-check >"$RES/pod-gpu-check.log"
kubelet_pods >"$RES/kubelet-pods-default.json"
cat "$RES/pod-gpu-check.log"
[[ $rc == 0 ]] && grep -q "$FACTS_UUID" "$RES/pod-gpu-check.log" && grep -q ' 0 mismatches' "$RES/pod-gpu-check.log"
check pod-gets-gpu $? "static pod requesting nvidia.com/gpu: 1 ran vectorAdd (0 mismatches) and nvidia-smi -L shows $FACTS_UUID"
rm -f /etc/kubernetes/manifests/gpu-check.yaml; wait_pods_gone
dp_stop
say "time-slicing: replicas 4"
dp_start timeslice4
wait_capacity 4; rc=$?
kubelet_view >"$RES/kubelet-capacity-timeslice4.json"
check kubelet-capacity-4 $rc "kubelet's registered nvidia.com/gpu devices with time-slicing: $(cat "$RES/kubelet-capacity-timeslice4.json")"
for i in 0 1 2 3; do pod_make "ts-$i" 20 >"/etc/kubernetes/manifests/ts-$i.yaml"; done
wait_pods_done ts-0 ts-1 ts-2 ts-3; rc=$?
for i in 0 1 2 3; do pod_log "ts-$i" >"$RES/pod-ts-$i.log"; done
kubelet_pods >"$RES/kubelet-pods-timeslice4.json"
head -50 "$RES"/pod-ts-*.log
"$PY" - "$RES" "$FACTS_UUID" <<'EOF'
import glob, json, re, sys
res, uuid = sys.argv[1], sys.argv[2]
pods = {}
for f in sorted(glob.glob(res + "/pod-ts-*.log")):
    t = open(f).read()
    s = re.search(r"START (\d+\.\d+)", t); e = re.search(r"END (\d+\.\d+)", t)
    pods[f.rsplit("/", 1)[1]] = {"start": float(s.group(1)) if s else None, "end": float(e.group(1)) if e else None,
                                "uuid": uuid in t, "zero_mismatches": " 0 mismatches" in t}
ok = len(pods) == 4 and all(p["start"] and p["end"] and p["uuid"] and p["zero_mismatches"] for p in pods.values())
overlap = ok and max(p["start"] for p in pods.values()) < min(p["end"] for p in pods.values())
json.dump({"pods": pods, "all_ran_at_once": bool(overlap)}, open(res + "/timeslice-pods.json", "w"), indent=1)
print(json.dumps({"pods": pods, "all_ran_at_once": bool(overlap)}))
sys.exit(0 if overlap else 1)
EOF
check four-pods-at-once $? "4 pods with nvidia.com/gpu: 1 ran at the same time on the one GPU, each 0 mismatches"

# ---------------------------------------------------------------------------------------------
say "the validator's node checks, for real (device plugin still registered)"
ap validate tests/lab/h200/validate.yml -e dest="$RES/validate.json"; rc=$?
check validator-node $rc "$(cat "$RES/validate.json" 2>/dev/null | "$PY" -c 'import json,sys; d=json.load(sys.stdin); print("ok=%s wall=%.3fs %s" % (d.get("ok"), d.get("wall_seconds", -1), [(c["name"], c["ok"], round(c["seconds"], 3)) for c in d.get("checks", [])]))' 2>&1)"
for i in 0 1 2 3; do rm -f "/etc/kubernetes/manifests/ts-$i.yaml"; done; wait_pods_gone
dp_stop

# ---------------------------------------------------------------------------------------------
say "doctor: healthy node, then a removed CDI spec, then the nvidia runtime gone from containerd"
ap doctor-ok playbooks/doctor.yml; rc=$?
[[ $rc == 0 ]] && grep -q 'no problems found' "$RES/doctor-ok.log"
check doctor-healthy $? "doctor on the configured node finds nothing (rc=$rc)"
grep -iE 'finding|ok|nothing' "$RES/doctor-ok.log" | tail -5
mv /etc/cdi/nvidia.yaml "$LANE/cdi-moved.yaml"
ap doctor-no-cdi playbooks/doctor.yml
grep -qiE 'cdi' "$RES/doctor-no-cdi.log" && grep -q 'container_toolkit' "$RES/doctor-no-cdi.log"
check doctor-names-missing-cdi $? "doctor names the missing CDI spec and the fix"
ap site-repair-cdi playbooks/site.yml; rc=$?
[[ $rc == 0 && -f /etc/cdi/nvidia.yaml ]]; check site-repairs-cdi $? "site.yml wrote the CDI spec again (changed=$(recap_changed site-repair-cdi))"
cp "$RES/containerd-config.before.toml" /etc/containerd/config.toml && "$LANE/containerd.sh" restart
ap doctor-no-runtime playbooks/doctor.yml
grep -qiE 'runtime' "$RES/doctor-no-runtime.log" && grep -q 'container_toolkit' "$RES/doctor-no-runtime.log"
check doctor-names-missing-runtime $? "doctor names the nvidia runtime missing from containerd's config and the fix"
ap site-repair-runtime playbooks/site.yml; rc=$?
[[ $rc == 0 ]] && cmp -s /etc/containerd/config.toml "$RES/containerd-config.after-site.toml"
check site-repairs-runtime $? "site.yml put the nvidia runtime back (rc=$rc; config equals the first run's)"
ap doctor-ok-2 playbooks/doctor.yml; rc=$?
[[ $rc == 0 ]] && grep -q 'no problems found' "$RES/doctor-ok-2.log"
check doctor-healthy-after-repair $? "doctor after the repairs finds nothing (rc=$rc)"

# ---------------------------------------------------------------------------------------------
say "uninstall: container_toolkit state=absent"
ap uninstall playbooks/container_toolkit.yml -e container_toolkit_state=absent; rc=$?
cmp "$RES/containerd-config.before.toml" /etc/containerd/config.toml
check uninstall-config-byte-identical $? "containerd config after uninstall is byte-identical to before the first run (rc=$rc)"
left=$(ls /etc/cdi/nvidia.yaml /usr/local/bin/nvidia-ctk /usr/local/bin/nvidia-container-runtime /usr/local/bin/nvidia-cdi-hook \
    /opt/gpuops/nvidia-container-toolkit /etc/nvidia-container-runtime/config.toml 2>/dev/null)
[[ -z $left ]]; check uninstall-removes-files $? "CDI spec, toolkit binaries and store, runtime config gone: ${left:-none left}"
"$LANE/containerd.sh" status; check containerd-running-after-uninstall $? "containerd restarted and running"

# ---------------------------------------------------------------------------------------------
say "stop every daemon the lane started"
lane_stop_all
sleep 1
leftover=$(pgrep -af 'containerd|kubelet|nvidia-device-plugin|gpu-feature-discovery|/pause' | grep -v pgrep)
[[ -z $leftover ]]; check no-daemon-left $? "${leftover:-none running}"
nvidia-smi --query-gpu=$SETTINGS_Q --format=csv,noheader >"$RES/gpu-settings-after.csv"
cmp -s "$RES/gpu-settings-before.csv" "$RES/gpu-settings-after.csv"
check gpu-settings-unchanged $? "$(cat "$RES/gpu-settings-after.csv")"

# ---------------------------------------------------------------------------------------------
fails=$(awk -F'\t' '$2=="FAIL"' "$CHECKS" | wc -l)
total=$(wc -l <"$CHECKS")
{
    echo "date=$(date -u +%F)"
    echo "gpu_uuid=$UUID"
    echo "gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
    echo "checks=$total failed=$fails"
    echo "wall_s=$(elapsed)"
} >"$RES/summary.txt"
cat "$RES/summary.txt"; cat "$CHECKS"
cp "$LANE"/logs/*.log "$RES/" 2>/dev/null
tar -C "$RES" -czf "$RESULTS/gpu-lane-results.tar.gz" .
cp "$RES/summary.txt" "$CHECKS" "$RESULTS/" 2>/dev/null
[[ $fails == 0 ]]
