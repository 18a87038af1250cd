# Sourced by run-tests.sh and run-kubenode.sh: the test lane's state dir and ports (not an interactive
# `make cluster-up` cluster's), its Python and its binaries on PATH.
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
CACHE=${GPUOPS_CACHE:-$HOME/.cache/gpuops}
export GPUOPS_CACHE=$CACHE
export CLUSTER_DIR=${CLUSTER_TEST_DIR:-$CACHE/cluster/test}
export CLUSTER_PORT_BASE=${CLUSTER_TEST_PORT_BASE:-26543}
export PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
export PATH=$CACHE/cluster/bin:$ROOT/.venv/bin:$PATH
