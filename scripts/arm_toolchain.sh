#!/usr/bin/env bash
# arm_toolchain.sh - provide an aarch64 cross compiler and a user-mode emulator, cached.
#
#   eval "$(scripts/arm_toolchain.sh)"
#
# Provides:
#   ISAFORGE_ZIG_CC        "<python3> -m ziglang cc": Zig's clang with musl, from PyPI (pip
#                          install ziglang if missing). Use: $ISAFORGE_ZIG_CC -target
#                          aarch64-linux-musl -static ...
#   ISAFORGE_QEMU_AARCH64  a qemu-aarch64 user-mode emulator >= 10.1 (new enough for SME2),
#                          extracted from Debian unstable's qemu-user package into the cache.
#
# Idempotent: a second run finds everything in the cache and downloads nothing. The machine's
# apt configuration and installed packages are never changed: the unstable index goes to a
# temporary lists directory through a temporary sources file, both removed on exit, and the
# .deb is unpacked with dpkg -x (not installed).
#
# Logs go to stderr; stdout is only the `export` lines (also saved to $CACHE/env.sh), printed
# last. Exits non-zero with a one-line reason on failure.
#
# Environment:
#   ISAFORGE_TOOLCHAIN_CACHE  cache folder (default $HOME/.cache/isaforge/toolchain)
#   ISAFORGE_PYTHON           python interpreter for ziglang (default python3)
#   ISAFORGE_DEBIAN_MIRROR    Debian mirror URI (default: the machine's own apt source)
#   ISAFORGE_QEMU_SUITE       Debian suite to take qemu from (default unstable)
set -euo pipefail

CACHE=${ISAFORGE_TOOLCHAIN_CACHE:-$HOME/.cache/isaforge/toolchain}
PYTHON=${ISAFORGE_PYTHON:-python3}
SUITE=${ISAFORGE_QEMU_SUITE:-unstable}
QEMU_MIN=10.1

log() { echo "arm_toolchain.sh: $*" >&2; }
die() {
    echo "arm_toolchain.sh: error: $*" >&2
    exit 1
}

mkdir -p "$CACHE" || die "cannot create the cache folder $CACHE"
CACHE=$(cd "$CACHE" && pwd)

TMP=$(mktemp -d "${TMPDIR:-/tmp}/isaforge-toolchain.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

# version_ge A B: A >= B as version numbers
version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }

# ---------------------------------------------------------------------------------------------
# Zig (C cross compiler with musl) from PyPI
# ---------------------------------------------------------------------------------------------
PY_ABS=$("$PYTHON" -c 'import sys; print(sys.executable)' 2>/dev/null || true)
[ -n "$PY_ABS" ] || die "python interpreter '$PYTHON' not found (set ISAFORGE_PYTHON)"
if ! zig_version=$("$PY_ABS" -m ziglang version 2>/dev/null); then
    log "ziglang not importable by $PY_ABS; installing it from PyPI"
    "$PY_ABS" -m pip install --disable-pip-version-check -q ziglang >&2 ||
        die "'$PY_ABS -m pip install ziglang' failed (no network to PyPI?)"
    zig_version=$("$PY_ABS" -m ziglang version 2>/dev/null) ||
        die "ziglang installed but '$PY_ABS -m ziglang version' still fails"
fi
log "zig $zig_version ($PY_ABS -m ziglang)"
ZIG_CC="$PY_ABS -m ziglang cc"

# ---------------------------------------------------------------------------------------------
# qemu-aarch64 >= 10.1
# ---------------------------------------------------------------------------------------------

# Print the version of a qemu-aarch64 binary ("10.1.2"), or nothing if it does not run.
qemu_version() {
    { "$1" --version 2>/dev/null || true; } |
        sed -n 's/^qemu-aarch64[^0-9]*version \([0-9][0-9.]*\).*/\1/p' | head -n1
}

qemu_ok() {
    local v
    [ -f "$1" ] && [ -x "$1" ] || return 1
    v=$(qemu_version "$1")
    [ -n "$v" ] && version_ge "$v" "$QEMU_MIN"
}

find_cached_qemu() {
    local f
    [ -d "$CACHE/qemu" ] || return 1
    while IFS= read -r f; do
        if qemu_ok "$f"; then
            echo "$f"
            return 0
        fi
    done < <(find "$CACHE/qemu" -mindepth 2 \( -name qemu-aarch64 -o -name qemu-aarch64-static \) \
        \( -type f -o -type l \) 2>/dev/null | sort -r)
    return 1
}

# The machine's Debian mirror URI and keyring, from its own apt sources.
machine_mirror() {
    local f uri="" key=""
    if [ -n "${ISAFORGE_DEBIAN_MIRROR:-}" ]; then
        uri=$ISAFORGE_DEBIAN_MIRROR
    else
        # deb822 sources: the first URI ending in /debian (not debian-security)
        for f in /etc/apt/sources.list.d/*.sources; do
            [ -f "$f" ] || continue
            local out
            out=$(awk '
                BEGIN { IGNORECASE = 1 }
                /^[ \t]*$/ { if (u != "") { print u "\t" k; exit } ; u = ""; k = ""; next }
                tolower($1) == "uris:" { for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) { u = $i; break } }
                tolower($1) == "signed-by:" { k = $2 }
                END { if (u != "") print u "\t" k }' "$f" | head -n1)
            if [ -n "$out" ]; then
                uri=${out%%$'\t'*}
                key=${out#*$'\t'}
                break
            fi
        done
        # one-line sources
        if [ -z "$uri" ]; then
            for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
                [ -f "$f" ] || continue
                uri=$(sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" |
                    awk '$1 == "deb" && $2 ~ /\/debian\/?$/ { print $2; exit }')
                [ -n "$uri" ] && break
            done
        fi
    fi
    [ -n "$uri" ] || uri=http://deb.debian.org/debian
    if [ -z "$key" ] || [ ! -f "$key" ]; then
        key=/usr/share/keyrings/debian-archive-keyring.gpg
    fi
    printf '%s\t%s\n' "${uri%/}" "$key"
}

fetch_qemu() {
    command -v apt-get >/dev/null || die "apt-get not found: cannot fetch qemu-user from Debian"
    command -v dpkg >/dev/null || die "dpkg not found: cannot unpack qemu-user"
    local mm uri key arch
    mm=$(machine_mirror)
    uri=${mm%%$'\t'*}
    key=${mm#*$'\t'}
    arch=$(dpkg --print-architecture)
    [ -f "$key" ] || die "Debian archive keyring $key not found (apt-get install debian-archive-keyring)"
    log "fetching qemu-user from Debian $SUITE ($uri, $arch) into $CACHE/qemu"

    # A temporary copy of the machine's source with only the suite changed, and private
    # lists/cache/archives folders, so the machine's apt state is untouched.
    mkdir -p "$TMP/lists/partial" "$TMP/cache/archives/partial" "$TMP/dl" "$TMP/etc/preferences.d"
    echo "deb [arch=$arch signed-by=$key] $uri $SUITE main" >"$TMP/sources.list"
    local -a apt=(-q
        -o Dir::Etc::sourcelist="$TMP/sources.list" -o Dir::Etc::sourceparts=-
        -o Dir::Etc::preferences="$TMP/etc/preferences" -o Dir::Etc::preferencesparts="$TMP/etc/preferences.d"
        -o Dir::State::Lists="$TMP/lists" -o Dir::Cache="$TMP/cache"
        -o Dir::Cache::archives="$TMP/cache/archives"
        -o Dir::Cache::pkgcache="$TMP/cache/pkgcache.bin" -o Dir::Cache::srcpkgcache="$TMP/cache/srcpkgcache.bin"
        -o APT::Sandbox::User=root -o Acquire::Languages=none -o Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled=false
        -o APT::Get::List-Cleanup=false)
    # apt-get update exits 0 when a fetch fails, so check that an index arrived
    if ! apt-get "${apt[@]}" update >"$TMP/update.log" 2>&1 ||
        ! ls "$TMP"/lists/*_Packages* >/dev/null 2>&1; then
        tail -n 20 "$TMP/update.log" >&2
        die "apt-get update of Debian $SUITE from $uri fetched no package index (see above)"
    fi

    # qemu-user carries the static binaries in current Debian; older layouts split them into
    # qemu-user-static. Follow Depends of a package that turns out to be an empty shell.
    local queue="qemu-user qemu-user-static" seen="" pkg deb bin="" stage="$TMP/stage"
    mkdir -p "$stage"
    while [ -n "$queue" ] && [ -z "$bin" ]; do
        pkg=${queue%% *}
        [ "$queue" = "$pkg" ] && queue="" || queue=${queue#* }
        case " $seen " in *" $pkg "*) continue ;; esac
        seen="$seen $pkg"
        rm -f "$TMP"/dl/*.deb
        if ! (cd "$TMP/dl" && apt-get "${apt[@]}" download "$pkg/$SUITE") >"$TMP/download.log" 2>&1; then
            log "no package $pkg in $SUITE: $(tail -n1 "$TMP/download.log")"
            continue
        fi
        deb=$(ls "$TMP"/dl/*.deb 2>/dev/null | head -n1)
        [ -n "$deb" ] || continue
        log "downloaded $(basename "$deb")"
        rm -rf "$stage" && mkdir -p "$stage"
        dpkg -x "$deb" "$stage" || die "dpkg -x $deb failed"
        bin=$(find "$stage" \( -name qemu-aarch64 -o -name qemu-aarch64-static \) -type f | head -n1)
        if [ -z "$bin" ]; then
            local deps
            deps=$(dpkg-deb -f "$deb" Depends 2>/dev/null | tr ',|' '\n\n' |
                sed -e 's/(.*)//' -e 's/:any//' -e 's/[[:space:]]//g' | grep '^qemu-user' || true)
            log "$pkg has no qemu-aarch64; following its dependencies: ${deps//$'\n'/ }"
            queue="$queue $(echo $deps)"
            queue=$(echo $queue)
        else
            if command -v file >/dev/null; then log "$(file -b "$bin" | cut -c1-100)"; fi
            local v
            v=$(qemu_version "$bin")
            [ -n "$v" ] || die "$(basename "$deb")'s qemu-aarch64 does not run here (not statically linked?)"
            version_ge "$v" "$QEMU_MIN" ||
                die "Debian $SUITE has qemu $v, older than the $QEMU_MIN needed for SME2"
            local ver
            ver=$(dpkg-deb -f "$deb" Version)
            local dest="$CACHE/qemu/$pkg-${ver//[^A-Za-z0-9.+~-]/_}"
            # keep only the aarch64 emulator (the package has every target, ~450 MB)
            find "$stage" \( -type f -o -type l \) -name 'qemu-*' ! -name qemu-aarch64 \
                ! -name qemu-aarch64-static -delete
            mkdir -p "$CACHE/qemu"
            rm -rf "$dest.tmp" "$dest"
            mv "$stage" "$dest.tmp"
            mv "$dest.tmp" "$dest"
            bin=$dest/${bin#"$stage"/}
        fi
    done
    [ -n "$bin" ] || die "no qemu-aarch64 found in Debian $SUITE's qemu-user packages (tried:$seen)"
}

QEMU=""
if [ -n "${ISAFORGE_QEMU_AARCH64:-}" ] && qemu_ok "$ISAFORGE_QEMU_AARCH64"; then
    QEMU=$ISAFORGE_QEMU_AARCH64
elif QEMU=$(find_cached_qemu); then
    :
else
    fetch_qemu
    QEMU=$(find_cached_qemu) || die "qemu-aarch64 >= $QEMU_MIN not found in $CACHE/qemu after fetching"
fi
log "$("$QEMU" --version | head -n1) ($QEMU)"

# ---------------------------------------------------------------------------------------------
# Smoke test once per (zig, qemu): cross-compile a static program and run it emulated.
# ---------------------------------------------------------------------------------------------
stamp="$CACHE/smoke-zig$zig_version-$(qemu_version "$QEMU")"
if [ ! -f "$stamp" ]; then
    log "smoke test: zig cc -target aarch64-linux-musl -static, run under qemu (first build of musl takes a while)"
    cat >"$TMP/hello.c" <<'EOF'
#include <stdio.h>
int main(void) {
#if defined(__aarch64__)
    puts("hello aarch64");
#else
    puts("wrong target");
#endif
    return 0;
}
EOF
    $ZIG_CC -target aarch64-linux-musl -static -O2 -o "$TMP/hello" "$TMP/hello.c" >&2 ||
        die "zig cc could not build a static aarch64-linux-musl program"
    out=$("$QEMU" -cpu max "$TMP/hello") || die "qemu-aarch64 could not run a static aarch64 program"
    [ "$out" = "hello aarch64" ] || die "smoke test printed '$out'"
    touch "$stamp"
fi

{
    echo "export ISAFORGE_ZIG_CC=\"$ZIG_CC\""
    echo "export ISAFORGE_QEMU_AARCH64=$QEMU"
} >"$CACHE/env.sh.tmp"
mv "$CACHE/env.sh.tmp" "$CACHE/env.sh"
cat "$CACHE/env.sh"
