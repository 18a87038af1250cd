#!/usr/bin/env bash
# ansible-test sanity on the newest ansible-core (issue 16: requires_ansible is what sanity passes on, lowest
# and newest). ansible-core 2.20+ needs Python >= 3.12 on the controller and this machine's Debian 12 has
# 3.11, so the run happens in a Debian 13 (trixie, Python 3.13) chroot, built once with debootstrap and
# cached under $GPUOPS_CACHE/sanity-newest; the newest ansible-core goes into a venv there (cached by version).
# The collection checked is the installed tarball's content (what `make install` lays down), as in test-sanity.
#
#   ANSIBLE_CORE_NEWEST=2.21.5 bash tests/lab/sanity-newest/run.sh [ansible-test sanity args...]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
CORE=${ANSIBLE_CORE_NEWEST:?set ANSIBLE_CORE_NEWEST (mk/sanity-newest.mk does)}
VENV=/opt/ansible-core-$CORE
SUITE=${SANITY_SUITE:-trixie}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
CACHE=${GPUOPS_CACHE:-$HOME/.cache/gpuops}/sanity-newest
CH=$CACHE/$SUITE-root
COLLECTION=${COLLECTION:-$ROOT/.collections/ansible_collections/gpuops/nvidia}
log() { printf '[sanity-newest %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
start=$SECONDS

[[ -f $COLLECTION/MANIFEST.json ]] || { log "no installed collection at $COLLECTION (run make install)"; exit 2; }
if [[ ! -f $CH/.ok ]]; then
    command -v debootstrap >/dev/null || {
        apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q debootstrap >/dev/null; }
    log "debootstrap $SUITE (minbase + python3, venv, git) into $CH (cold: a few minutes)"
    rm -rf "$CH"; mkdir -p "$CACHE"
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates,git "$SUITE" "$CH" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 ||
        { tail -20 "$CACHE/debootstrap.log"; exit 1; }
    touch "$CH/.ok"
fi

cleanup() { umount "$CH/proc" 2>/dev/null || true; umount "$CH/dev" 2>/dev/null || true; }
trap cleanup EXIT
mountpoint -q "$CH/proc" || mount -t proc proc "$CH/proc"
mountpoint -q "$CH/dev" || mount --bind /dev "$CH/dev"
cp /etc/resolv.conf "$CH/etc/resolv.conf"
# the host's trust store and pip settings (a PyPI mirror, a TLS-intercepting proxy's CA) hold in the chroot too
HOST_CA=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
[[ -f $HOST_CA ]] && cp "$HOST_CA" "$CH/etc/ssl/certs/host-ca.crt"
ENVS=(HOME=/root LANG=C.UTF-8)
# ansible-test runs pip with an environment of its own: the CA goes to the chroot's pip.conf as well
[[ -f $CH/etc/ssl/certs/host-ca.crt ]] && printf '[global]\ncert = /etc/ssl/certs/host-ca.crt\n' >"$CH/etc/pip.conf"
[[ -f $CH/etc/ssl/certs/host-ca.crt ]] && ENVS+=(SSL_CERT_FILE=/etc/ssl/certs/host-ca.crt PIP_CERT=/etc/ssl/certs/host-ca.crt
                                              REQUESTS_CA_BUNDLE=/etc/ssl/certs/host-ca.crt)
while IFS= read -r kv; do ENVS+=("$kv"); done < <(env | grep -E '^(PIP_INDEX_URL|PIP_EXTRA_INDEX_URL|PIP_TRUSTED_HOST|PIP_DEFAULT_TIMEOUT|https?_proxy|HTTPS?_PROXY|no_proxy|NO_PROXY)=' || true)
in_chroot() { chroot "$CH" env -i "${ENVS[@]}" PATH="$VENV/bin:/usr/local/bin:/usr/bin:/bin" "$@"; }

# the venv holds exactly requirements.lock (every distribution pinned, hashes checked); a new lock makes it anew
LOCK=$HERE/requirements.lock
grep -qx "ansible-core==$CORE \\\\" "$LOCK" || { log "requirements.lock does not pin ansible-core==$CORE: run make lock"; exit 2; }
LOCK_SUM=$(sha256sum "$LOCK" | cut -d' ' -f1)
if [[ ! -x $CH$VENV/bin/ansible-test || $(cat "$CH$VENV/.lock-sha256" 2>/dev/null) != "$LOCK_SUM" ]]; then
    log "ansible-core $CORE into $VENV from requirements.lock (chroot Python $(chroot "$CH" python3 -c 'import sys; print(sys.version.split()[0])'))"
    rm -rf "$CH$VENV"
    in_chroot python3 -m venv "$VENV"
    cp "$LOCK" "$CH$VENV/requirements.lock"
    in_chroot "$VENV/bin/pip" install -q --disable-pip-version-check --require-hashes --no-deps -r "$VENV/requirements.lock"
    echo "$LOCK_SUM" >"$CH$VENV/.lock-sha256"
fi
PYV=$(chroot "$CH" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')

# the collection where ansible-test wants it, with this version's ignore file (tests/sanity/ignore-X.Y.txt)
W=$CH/work/ansible_collections/gpuops/nvidia
rm -rf "$CH/work"; mkdir -p "$(dirname "$W")"
cp -a "$COLLECTION" "$W"
mkdir -p "$W/tests/sanity"
minor=${CORE%.*}
[[ -f $ROOT/tests/sanity/ignore-$minor.txt ]] || { log "no tests/sanity/ignore-$minor.txt: add one for ansible-core $minor"; exit 2; }
cp "$ROOT/tests/sanity/ignore-$minor.txt" "$W/tests/sanity/"
# ansible-test fetches its pip bootstrap from a host we cannot reach: give it ours, under every name it may use
mkdir -p "$CH/root/.ansible/test/cache"
for v in $(grep -rhoE "pip='[0-9.]+'" "$CH$VENV"/lib/python3*/site-packages/ansible_test/_internal/python_requirements.py | grep -oE '[0-9.]+' | sort -u); do
    cp "$ROOT/tests/sanity/get_pip_offline.py" "$CH/root/.ansible/test/cache/get_pip_${v//./_}.py"
done

log "ansible-test sanity, ansible-core $CORE, Python $PYV"
rc=0
in_chroot bash -c "cd /work/ansible_collections/gpuops/nvidia && ansible-test sanity --python $PYV --requirements --color no $*" || rc=$?
log "done in $((SECONDS - start)) s, rc=$rc"
exit $rc
