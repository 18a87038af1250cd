# Shared by the lanes that carry a kit to the lent GPU machine (benchmarks/cluster_deploy/device.sh,
# tests/lab/gpu/cluster.sh), sourced after they define log and die: that machine takes 64 MiB a call, the
# working tree included, and may lack xz.

KIT_LIMIT=$((64 * 1024 * 1024))

kit_unxz() {  # kit_unxz <file>: xz -dc, or Python's lzma where the machine has no xz
    if command -v xz >/dev/null; then xz -dc "$1"
    else "${PYTHON3:-python3}" -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' "$1"; fi
}

kit_check_parts() {  # kit_check_parts <repo> <kit dir> <part>...: each part's call, with the working tree, fits
    local repo=$1 kit=$2 tree part size; shift 2
    tree=$(cd "$repo" && git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- | tail -1 | cut -f1)
    for part in "$@"; do
        size=$(($(du -cb "$kit/$part" | tail -1 | cut -f1) + tree))
        log "call carrying $(basename "$kit")/$part: $((size / 1048576)) MiB with the working tree ($((tree / 1048576)) MiB)"
        ((size < KIT_LIMIT)) || die "$(basename "$kit")/$part and the working tree exceed 64 MiB"
    done
}

kit_wheels() {  # kit_wheels <repo> <dir> <python version> <distribution>...: wheels of the distributions and all they
    # require, at the versions of the repo's .venv (requirements-dev.lock), for that machine's Python
    local repo=$1 dir=$2 py=$3; shift 3
    mkdir -p "$dir"
    "$repo/.venv/bin/python" "$repo/tests/lab/wheel_pins.py" --python "$py" "$@" >"$dir/pins.txt"
    "$repo/.venv/bin/python" -m pip download -q --no-deps --only-binary=:all: --python-version "$py" \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform any -d "$dir" -r "$dir/pins.txt"
}
