#!/usr/bin/env bash
# simde.sh - provide SIMDe's headers (portable C implementations of the x86 intrinsics), cached,
# for the test-only build of the AVX-512 kernels on CPUs without AVX-512
# (tests/test_q4_avx512_simde.py, tests/native/build_q4_simde.sh). Prints the include folder
# (the one holding simde/x86/avx512.h) on stdout.
#
# Uses, in order: $ISAFORGE_SIMDE_INCLUDE, the system's /usr/include (package libsimde-dev
# installed), the cache, else Debian's libsimde-dev .deb fetched with `apt-get download` and
# unpacked with dpkg -x into the cache (the machine's packages are not changed). Idempotent.
#
# Environment: ISAFORGE_SIMDE_CACHE (default $HOME/.cache/isaforge/simde).
set -euo pipefail
die() {
    echo "simde.sh: error: $*" >&2
    exit 1
}
have() { [ -f "$1/simde/x86/avx512.h" ]; }
if [ -n "${ISAFORGE_SIMDE_INCLUDE:-}" ]; then
    have "$ISAFORGE_SIMDE_INCLUDE" || die "ISAFORGE_SIMDE_INCLUDE=$ISAFORGE_SIMDE_INCLUDE has no simde/x86/avx512.h"
    echo "$ISAFORGE_SIMDE_INCLUDE"
    exit 0
fi
if have /usr/include; then
    echo /usr/include
    exit 0
fi
CACHE=${ISAFORGE_SIMDE_CACHE:-$HOME/.cache/isaforge/simde}
if have "$CACHE/root/usr/include"; then
    echo "$CACHE/root/usr/include"
    exit 0
fi
command -v apt-get >/dev/null && command -v dpkg >/dev/null ||
    die "no apt-get/dpkg: install SIMDe's headers and set ISAFORGE_SIMDE_INCLUDE"
mkdir -p "$CACHE" || die "cannot create $CACHE"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/isaforge-simde.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
chmod 755 "$TMP" # apt-get download runs as _apt where it can
(cd "$TMP" && apt-get download -q libsimde-dev >&2) ||
    die "'apt-get download libsimde-dev' failed (apt lists empty? run apt-get update)"
deb=$(ls "$TMP"/libsimde-dev_*.deb 2>/dev/null | head -n1)
[ -n "$deb" ] || die "apt-get download left no libsimde-dev .deb"
rm -rf "$CACHE/root.tmp"
dpkg -x "$deb" "$CACHE/root.tmp" || die "dpkg -x $deb failed"
rm -rf "$CACHE/root"
mv "$CACHE/root.tmp" "$CACHE/root"
have "$CACHE/root/usr/include" || die "the unpacked package has no simde/x86/avx512.h"
echo "simde.sh: SIMDe $(basename "$deb") unpacked into $CACHE/root" >&2
echo "$CACHE/root/usr/include"
