#!/usr/bin/env bash
# The cluster lane's real node on its own (make test-kubenode; run-tests.sh runs it after the KWOK proofs): a
# fresh control plane with the default KWOK fleet, this machine joined to it as kubenode-0 (tests/lab/kubenode),
# test_kubenode.py, then node.sh stop (however pytest ends) and the control plane stopped -- purged when the
# tests passed, kept with its logs when they failed.
set -euo pipefail
source "$(dirname "$0")/test-env.sh"
export KN_DIR=${KN_DIR:-$CACHE/kubenode/lane}

stop_node() { KN_KUBECONFIG=$CLUSTER_DIR/kubeconfig bash "$ROOT/tests/lab/kubenode/node.sh" stop; }
stop_node >/dev/null 2>&1 || true
"$HERE/down.sh" --purge >/dev/null 2>&1 || true
"$HERE/up.sh" "${NODES_TEST:-$HERE/nodes/default.yml}"
trap stop_node EXIT
rc=0
"$PYTHON" -m pytest -p no:cacheprovider -v "$HERE/test_kubenode.py" "$@" || rc=$?
stop_node
trap - EXIT
if ((rc == 0)); then
    "$HERE/down.sh" --purge
else
    "$HERE/down.sh"
    echo "[cluster] real node FAILED (rc=$rc); logs and state kept in $CLUSTER_DIR and $KN_DIR" >&2
fi
exit $rc
