#!/usr/bin/env bash
# Fetch the official TOML conformance suite (toml-test) and print the folder
# that holds its tests/ tree (tests/valid, tests/invalid, tests/files-toml-1.0.0).
#
# toml-test is published as a Go module; its zip carries the test files, so the
# ordinary Go client fetches it through the module proxy into a module cache
# kept under the project's cache ($GPUOPS_CACHE, default ~/.cache/gpuops).
# A second run is offline: the module cache already has it.
#
#   tests/toml_test/fetch.sh            -> /root/.cache/gpuops/go/mod/github.com/toml-lang/toml-test/v2@v2.2.0
#   TOML_TEST_VERSION=v2.2.0 tests/toml_test/fetch.sh
#
# Exit status 0 and the folder on stdout, or non-zero with the reason on stderr.
set -euo pipefail

MODULE="${TOML_TEST_MODULE:-github.com/toml-lang/toml-test/v2}"
VERSION="${TOML_TEST_VERSION:-v2.2.0}"
CACHE="${GPUOPS_CACHE:-$HOME/.cache/gpuops}"
export GOMODCACHE="${TOML_TEST_GOMODCACHE:-$CACHE/go/mod}"
export GOFLAGS=-mod=mod
export GOTOOLCHAIN=local

dir="$GOMODCACHE/$MODULE@$VERSION"
if [ -f "$dir/tests/files-toml-1.0.0" ]; then
    echo "$dir"
    exit 0
fi

GO="${TOML_TEST_GO:-$(command -v go || true)}"
[ -n "$GO" ] || GO=/usr/local/go/bin/go
if [ ! -x "$GO" ]; then
    echo "toml-test: no Go toolchain to fetch $MODULE@$VERSION" >&2
    exit 3
fi

mkdir -p "$GOMODCACHE"
# outside any module, so go.mod files around us do not matter
cd "$(mktemp -d)"
trap 'rm -rf "$PWD"' EXIT
if ! json="$("$GO" mod download -json "$MODULE@$VERSION" 2>&1)"; then
    why="$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Error": "\(.*\)",\{0,1\}$/\1/p')"
    echo "toml-test: go mod download $MODULE@$VERSION failed: ${why:-$json}" >&2
    exit 4
fi
got="$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
if [ -z "$got" ] || [ ! -f "$got/tests/files-toml-1.0.0" ]; then
    echo "toml-test: $MODULE@$VERSION has no tests/files-toml-1.0.0 (got: $json)" >&2
    exit 5
fi
echo "$got"
