#!/usr/bin/env bash
# The cluster lane: a fresh control plane (own state dir and ports, so an interactive
# `make cluster-up` cluster is left alone), the default node spec, the pytest proofs,
# then a clean stop; then a real node (test_kubenode.py) and the fleet regression check, each
# on a control plane of its own. Logs and state are kept on failure (path printed).
set -euo pipefail
source "$(dirname "$0")/test-env.sh"

# node roots paired with simulated nodes (facts via gpu_facts root=...)
[[ -d $ROOT/.lab/roots/h200 ]] || "$PYTHON" "$ROOT/tests/fixtures/noderoots/build.py" --out "$ROOT/.lab/roots" >/dev/null
"$HERE/down.sh" --purge >/dev/null 2>&1 || true
"$HERE/up.sh" "${NODES_TEST:-$HERE/nodes/default.yml}"
rc=0
"$PYTHON" -m pytest -p no:cacheprovider -v "$HERE/test_cluster_lane.py" "$HERE/test_driver_upgrade.py" \
    "$HERE/test_kubevirt.py" "$HERE/test_dra.py" "$@" || rc=$?
if ((rc == 0)); then
    "$HERE/down.sh" --purge
    # the real node (kubelet + containerd here, tests/lab/kubenode) beside a fresh KWOK fleet: a control plane of
    # its own, so that nothing the tests above left behind is on it
    "$HERE/run-kubenode.sh" || exit $?
    # the fleet regression check brings up its own 100-node control plane (audit log of every request)
    "$PYTHON" -m pytest -p no:cacheprovider -v -s "$HERE/test_fleet_regression.py" || rc=$?
else
    "$HERE/down.sh"
    echo "[cluster] FAILED (rc=$rc); logs and state kept in $CLUSTER_DIR" >&2
fi
exit $rc
