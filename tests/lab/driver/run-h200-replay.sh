#!/usr/bin/env bash
# Rehearse tests/lab/h200/driver_check.yml against the replayed H200 capture (tests/fixtures/nodes),
# exactly as the lead runs it on the real node (connection local, check mode), but reading the node root.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../../.." && pwd)"
BIN="${BIN:-$REPO/.venv/bin}"
root="$(mktemp -d)"; trap 'rm -rf "$root"' EXIT
"$BIN/python" -c "import sys; sys.path.insert(0, '$REPO/tests/fixtures/noderoots'); import noderoots; noderoots.build('h200', '$root/h200')"
ANSIBLE_COLLECTIONS_PATH="${ANSIBLE_COLLECTIONS_PATH:-$REPO/.collections}" \
  "$BIN/ansible-playbook" -i localhost, -c local --check "$REPO/tests/lab/h200/driver_check.yml" \
  -e driver_check_root="$root/h200" -e ansible_python_interpreter="$BIN/python" "$@"
