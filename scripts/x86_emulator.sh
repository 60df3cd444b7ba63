#!/usr/bin/env bash
# x86_emulator.sh - provide Bochs and a bootable Linux to run static x86-64 test drivers on an
# emulated CPU with AVX-512 VNNI and AVX-VNNI (tests/test_x86_emulated.py), cached.
#
#   eval "$(scripts/x86_emulator.sh)"
#
# Provides (paths in the cache):
#   ISAFORGE_BOCHS           a wrapper that runs Debian trixie's Bochs 3.0 (bochs-bin) with the
#                            package's own plugins, trixie's glibc loader (the binary needs
#                            glibc >= 2.38) and stub libgtk-3/libgdk-3 (linked for the debugger
#                            GUI only, never called with display_library rfb)
#   ISAFORGE_BOCHS_BIOS      BIOS-bochs-latest;   ISAFORGE_BOCHS_VGABIOS  vgabios.bin
#   ISAFORGE_X86EMU_KERNEL   bookworm's linux-image-*-cloud-amd64 vmlinuz (6.1: 8250 serial
#                            console, initramfs, AVX-512 state built in)
#   ISAFORGE_X86EMU_BIN      folder with syslinux (its mtools installer) and mtools (mformat,
#                            mcopy) from bookworm, to make a bootable FAT disk image without mount
#   ISAFORGE_ZIG_CC          "<python3> -m ziglang cc" (pip install ziglang if missing)
#
# Why Bochs 3.0 and not unstable's 3.1: the 3.1 build stops the guest kernel with a divide
# error in __clocksource_update_freq_scale (docs/emulation.md).
#
# Idempotent: a second run finds everything in the cache and downloads nothing. The machine's
# apt configuration and installed packages are never changed (private lists folder and sources
# file, removed on exit; .debs unpacked with dpkg -x). Logs go to stderr; stdout is only the
# `export` lines (also saved to $CACHE/x86emu-env.sh). Exits non-zero with a one-line reason.
#
# Environment:
#   ISAFORGE_TOOLCHAIN_CACHE  cache folder (default $HOME/.cache/isaforge/toolchain)
#   ISAFORGE_PYTHON           python interpreter for ziglang (default python3)
#   ISAFORGE_DEBIAN_MIRROR    Debian mirror URI (default: the machine's own apt source)
set -euo pipefail

CACHE=${ISAFORGE_TOOLCHAIN_CACHE:-$HOME/.cache/isaforge/toolchain}
PYTHON=${ISAFORGE_PYTHON:-python3}
BOCHS_SUITE=trixie
KERNEL_SUITE=bookworm

log() { echo "x86_emulator.sh: $*" >&2; }
die() {
    echo "x86_emulator.sh: error: $*" >&2
    exit 1
}

mkdir -p "$CACHE" || die "cannot create the cache folder $CACHE"
CACHE=$(cd "$CACHE" && pwd)
EMU=$CACHE/x86emu
TMP=$(mktemp -d "${TMPDIR:-/tmp}/isaforge-x86emu.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

# ---------------------------------------------------------------------------------------------
# Zig (static x86_64-linux-musl drivers, the stub libraries)
# ---------------------------------------------------------------------------------------------
PY_ABS=$("$PYTHON" -c 'import sys; print(sys.executable)' 2>/dev/null || true)
[ -n "$PY_ABS" ] || die "python interpreter '$PYTHON' not found (set ISAFORGE_PYTHON)"
if ! "$PY_ABS" -m ziglang version >/dev/null 2>&1; then
    log "ziglang not importable by $PY_ABS; installing it from PyPI"
    "$PY_ABS" -m pip install --disable-pip-version-check -q ziglang >&2 ||
        die "'$PY_ABS -m pip install ziglang' failed (no network to PyPI?)"
fi
ZIG_CC="$PY_ABS -m ziglang cc"

# ---------------------------------------------------------------------------------------------
# Debian packages, unpacked
# ---------------------------------------------------------------------------------------------
machine_mirror() {
    local f uri=${ISAFORGE_DEBIAN_MIRROR:-}
    if [ -z "$uri" ]; then
        for f in /etc/apt/sources.list.d/*.sources; do
            [ -f "$f" ] || continue
            uri=$(awk 'tolower($1) == "uris:" { for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) { print $i; exit } }' "$f")
            [ -n "$uri" ] && break
        done
    fi
    if [ -z "$uri" ]; then
        for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
            [ -f "$f" ] || continue
            uri=$(sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" |
                awk '$1 == "deb" && $2 ~ /\/debian\/?$/ { print $2; exit }')
            [ -n "$uri" ] && break
        done
    fi
    echo "${uri:-http://deb.debian.org/debian}" | sed 's#/$##'
}

# apt_for SUITE: set APT to an apt-get command line with a private state for SUITE (updated)
apt_for() {
    local suite=$1 d="$TMP/apt-$1" key=/usr/share/keyrings/debian-archive-keyring.gpg arch
    command -v apt-get >/dev/null || die "apt-get not found: cannot fetch Debian packages"
    [ -f "$key" ] || die "Debian archive keyring $key not found"
    arch=$(dpkg --print-architecture)
    [ "$arch" = amd64 ] || die "the emulator packages are amd64 builds; this machine is $arch"
    mkdir -p "$d/lists/partial" "$d/cache/archives/partial" "$d/etc/preferences.d"
    echo "deb [arch=$arch signed-by=$key] $MIRROR $suite main" >"$d/sources.list"
    APT_OPTS=(-o Dir::Etc::sourcelist="$d/sources.list" -o Dir::Etc::sourceparts=-
        -o Dir::Etc::preferences="$d/etc/preferences" -o Dir::Etc::preferencesparts="$d/etc/preferences.d"
        -o Dir::State::Lists="$d/lists" -o Dir::Cache="$d/cache" -o Dir::Cache::archives="$d/cache/archives"
        -o Dir::Cache::pkgcache="$d/cache/pkgcache.bin" -o Dir::Cache::srcpkgcache="$d/cache/srcpkgcache.bin"
        -o APT::Sandbox::User=root -o Acquire::Languages=none
        -o Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled=false -o APT::Get::List-Cleanup=false)
    APT=(apt-get -q "${APT_OPTS[@]}")
    if [ ! -f "$d/updated" ]; then
        if ! "${APT[@]}" update >"$d/update.log" 2>&1 || ! ls "$d"/lists/*_Packages* >/dev/null 2>&1; then
            tail -n 20 "$d/update.log" >&2
            die "apt-get update of Debian $suite from $MIRROR fetched no package index (see above)"
        fi
        touch "$d/updated"
    fi
}

# fetch SUITE DEST PKG...: download the packages from SUITE and unpack them all into DEST
fetch() {
    local suite=$1 dest=$2 pkg deb
    shift 2
    apt_for "$suite"
    rm -rf "$dest.tmp" && mkdir -p "$dest.tmp" "$TMP/dl-$suite"
    for pkg in "$@"; do
        rm -f "$TMP/dl-$suite"/*.deb
        (cd "$TMP/dl-$suite" && "${APT[@]}" download "$pkg/$suite") >"$TMP/download.log" 2>&1 ||
            die "cannot download $pkg from Debian $suite: $(tail -n1 "$TMP/download.log")"
        deb=$(ls "$TMP/dl-$suite"/*.deb)
        log "unpacking $(basename "$deb")"
        dpkg -x "$deb" "$dest.tmp" || die "dpkg -x $deb failed"
    done
    rm -rf "$dest" && mv "$dest.tmp" "$dest"
}

MIRROR=$(machine_mirror)

if [ ! -x "$EMU/bochs/usr/bin/bochs-bin" ]; then
    log "fetching Bochs from Debian $BOCHS_SUITE ($MIRROR) into $EMU/bochs"
    fetch "$BOCHS_SUITE" "$EMU/bochs" bochs bochsbios vgabios libc6 libltdl7 libsamplerate0
fi
BX=$EMU/bochs
LOADER=$BX/usr/lib64/ld-linux-x86-64.so.2
[ -e "$LOADER" ] || LOADER=$BX/lib64/ld-linux-x86-64.so.2
[ -e "$LOADER" ] || die "no ld-linux-x86-64.so.2 in the unpacked libc6 ($BX)"

if ! ls "$EMU"/linux/boot/vmlinuz-* >/dev/null 2>&1 || [ ! -x "$EMU/linux/usr/bin/syslinux" ]; then
    apt_for "$KERNEL_SUITE"
    kpkg=$(apt-cache "${APT_OPTS[@]}" pkgnames linux-image- 2>/dev/null |
        grep -E '^linux-image-[0-9].*-cloud-amd64$' | sort -V | tail -n1 || true)
    [ -n "$kpkg" ] || die "no linux-image-*-cloud-amd64 package in Debian $KERNEL_SUITE"
    log "fetching $kpkg, syslinux and mtools from Debian $KERNEL_SUITE into $EMU/linux"
    fetch "$KERNEL_SUITE" "$EMU/linux" "$kpkg" syslinux syslinux-common mtools
fi
KERNEL=$(ls "$EMU"/linux/boot/vmlinuz-* | sort -V | tail -n1)

# Stub GTK/GDK libraries: bochs-bin links them (BIND_NOW) for its debugger GUI only.
if [ ! -f "$EMU/stubs/libgtk-3.so.0" ] || [ ! -f "$EMU/stubs/libgdk-3.so.0" ]; then
    mkdir -p "$EMU/stubs"
    objdump -T "$BX/usr/bin/bochs-bin" >"$TMP/syms" 2>/dev/null || die "objdump (binutils) is needed"
    { echo '#include <stdlib.h>'
        awk '/\*UND\*/ { print $NF }' "$TMP/syms" | grep -E '^_?(gtk|gdk)_' | sort -u |
            sed 's/.*/void &(void) { abort(); }/'; } >"$TMP/gtkstub.c"
    for lib in gtk gdk; do
        $ZIG_CC -target x86_64-linux-gnu -shared -fPIC -O1 -o "$EMU/stubs/lib$lib-3.so.0" \
            "-Wl,-soname,lib$lib-3.so.0" "$TMP/gtkstub.c" >&2 || die "cannot build the stub lib$lib-3.so.0"
    done
fi

cat >"$EMU/bochs.sh.tmp" <<EOF
#!/bin/sh
# Bochs from Debian $BOCHS_SUITE, unpacked by scripts/x86_emulator.sh
export LTDL_LIBRARY_PATH=$BX/usr/lib/x86_64-linux-gnu/bochs/plugins BXSHARE=$BX/usr/share/bochs
exec $LOADER --library-path $BX/usr/lib/x86_64-linux-gnu:$BX/lib/x86_64-linux-gnu:$EMU/stubs:/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu $BX/usr/bin/bochs-bin "\$@"
EOF
chmod +x "$EMU/bochs.sh.tmp" && mv "$EMU/bochs.sh.tmp" "$EMU/bochs.sh"

# Smoke test: Bochs starts and knows the CPU model the tests use.
cpus=$("$EMU/bochs.sh" -help cpu 2>&1 || true)
if ! grep -qx sapphire_rapids <<<"$cpus"; then
    tail -n 5 <<<"$cpus" >&2
    die "Bochs ($EMU/bochs.sh) does not start or has no sapphire_rapids CPU model (see above)"
fi
for f in mformat mcopy syslinux; do
    [ -x "$EMU/linux/usr/bin/$f" ] || die "$f missing from $EMU/linux/usr/bin"
done
log "Bochs $(sed -n 's/.*Bochs x86 Emulator \([0-9.]*\).*/\1/p' <<<"$cpus" | head -n1), kernel $(basename "$KERNEL")"

{
    echo "export ISAFORGE_ZIG_CC=\"$ZIG_CC\""
    echo "export ISAFORGE_BOCHS=$EMU/bochs.sh"
    echo "export ISAFORGE_BOCHS_BIOS=$BX/usr/share/bochs/BIOS-bochs-latest"
    echo "export ISAFORGE_BOCHS_VGABIOS=$BX/usr/share/vgabios/vgabios.bin"
    echo "export ISAFORGE_X86EMU_KERNEL=$KERNEL"
    echo "export ISAFORGE_X86EMU_BIN=$EMU/linux/usr/bin"
} >"$CACHE/x86emu-env.sh.tmp"
mv "$CACHE/x86emu-env.sh.tmp" "$CACHE/x86emu-env.sh"
cat "$CACHE/x86emu-env.sh"
