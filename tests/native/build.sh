#!/usr/bin/env bash
# build.sh OUT_DIR [TARGET...] - build the native test drivers (if_native_test.c,
# attn_native_test.c and detmath_test.c) from csrc/.
#
# TARGET (default: aarch64):
#   aarch64      static aarch64-linux-musl binary with Zig's clang ($ISAFORGE_ZIG_CC, else
#                `python3 -m ziglang cc`); portable sources only (no IF_X86_TIERS). Run it
#                with qemu-aarch64 (scripts/arm_toolchain.sh provides both).
#   native       this machine's `cc` (or $CC) against the system libc, with the x86 tier files
#                (each with its own ISA flags from csrc/sources.txt, as CMakeLists.txt) when the
#                host is x86-64.
#   x86_64-musl  static x86_64-linux-musl binary with Zig: same sources as `native` on x86-64
#                but musl's libm, to tell a libm difference from an architecture difference.
# Writes OUT_DIR/if_native_test-TARGET, OUT_DIR/attn_native_test-TARGET, OUT_DIR/detmath_test-TARGET (and, for aarch64, OUT_DIR/asm-aarch64/*.s: the
# assembly of each Arm tier file, from the same compiler and flags). ISAFORGE_NATIVE_X86_TIERS=0 leaves the x86 tier files
# out of the x86-64 builds (scalar tier only).
set -euo pipefail

[ $# -ge 1 ] || { echo "usage: $0 OUT_DIR [aarch64|native|x86_64-musl]..." >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$1"
OUT=$(cd "$1" && pwd)
shift
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(aarch64)

cd "$ROOT"
# The kernel core's sources and each ISA group's flags, as CMakeLists.txt gets them: from
# csrc/manifest.py (csrc/sources.txt plus the kernel files found by name). It defines
# GROUP_ARCH_<group>, GROUP_FLAGS_<group>, GROUP_ZIGFLAGS_<group> and SOURCES ("GROUP PATH"),
# and writes the kernels' descriptor declarations (if_kernel_decls.h) into OUT/generated.
manifest=$(python3 csrc/manifest.py --shell --header "$OUT/generated/if_kernel_decls.h") || {
    echo "build.sh: csrc/manifest.py failed" >&2
    exit 2
}
eval "$manifest"
CFLAGS=(-O3 -std=c11 -ffp-contract=off -fno-fast-math -Wall -Wextra -Icsrc/include "-I$OUT/generated")
LIBS=(-lm -lpthread)

zig_cc() {
    local cc=${ISAFORGE_ZIG_CC:-python3 -m ziglang cc}
    # shellcheck disable=SC2086 # ISAFORGE_ZIG_CC is a command line ("python3 -m ziglang cc")
    $cc "$@"
}

# build NAME X86(0/1) COMPILER-FUNCTION EXTRA-FLAGS...
build() {
    local name=$1 x86=$2 ccfn=$3
    shift 3
    local extra=("$@") obj="$OUT/obj-$name" objs=() src flags o
    rm -rf "$obj"
    mkdir -p "$obj"
    local defs=()
    # _DEFAULT_SOURCE: features.c's x86 path calls syscall(), which <unistd.h> declares under
    # strict -std=c11 only with it (CMake builds with -std=gnu11, where it is implied).
    [ "$name" != aarch64 ] && defs+=(-D_DEFAULT_SOURCE)
    [ "$x86" = 1 ] && defs+=(-DIF_X86_TIERS=1)
    [ "$name" = aarch64 ] && defs+=(-DIF_ARM_TIERS=1)
    local entry group arch zig=0
    [ "$ccfn" = zig_cc ] && zig=1
    for entry in "${SOURCES[@]}"; do
        group=${entry%% *}
        src=${entry#* }
        eval "arch=\$GROUP_ARCH_$group flags=\$GROUP_FLAGS_$group"
        # the x86 groups only in x86-64 builds with the tiers, the Arm groups only for aarch64
        if [ "$arch" = x86 ] && [ "$x86" != 1 ]; then continue; fi
        if [ "$arch" = arm ] && [ "$name" != aarch64 ]; then continue; fi
        [ $zig = 1 ] && eval "flags=\${GROUP_ZIGFLAGS_$group-\$flags}"
        o="$obj/$(echo "$src" | tr / _).o"
        # shellcheck disable=SC2086 # flags is a list
        "$ccfn" "${extra[@]}" "${CFLAGS[@]}" "${defs[@]}" $flags -c "$src" -o "$o"
        objs+=("$o")
        if [ "$arch" = arm ]; then
            # the assembly of the same compile, for the instruction-count test
            mkdir -p "$OUT/asm-$name"
            # shellcheck disable=SC2086
            "$ccfn" "${extra[@]}" "${CFLAGS[@]}" "${defs[@]}" $flags -S "$src" \
                -o "$OUT/asm-$name/$(basename "$src" .c).s"
        fi
    done
    # detmath_test's checks of the vector exp copies: detmath_lanes.c once per x86 vector
    # width, with the flags of the group whose kernels include that copy
    local lanes=()
    if [ "$x86" = 1 ]; then
        # shellcheck disable=SC2086 # the groups' flags are lists
        "$ccfn" "${extra[@]}" "${CFLAGS[@]}" $GROUP_FLAGS_avx2 -DLANES=8 \
            -c tests/native/detmath_lanes.c -o "$obj/detmath_lanes8.o"
        # shellcheck disable=SC2086
        "$ccfn" "${extra[@]}" "${CFLAGS[@]}" $GROUP_FLAGS_avx512 -DLANES=16 \
            -c tests/native/detmath_lanes.c -o "$obj/detmath_lanes16.o"
        lanes=("$obj/detmath_lanes8.o" "$obj/detmath_lanes16.o")
    fi
    # if_native_test's test-only tables (the bench's ifb_test_table: amx_emulated from
    # csrc/testing/, scalar flags; the K-quant ones, q?k_*, AVX-512 code: the avx512 group's
    # flags), as the _bench module links them; x86 only
    local testing=() tflags
    if [ "$x86" = 1 ]; then
        for src in csrc/testing/*.c csrc/bench/bench_kernels.c; do
            o="$obj/testing_$(basename "$src" .c).o"
            tflags=""
            case $(basename "$src") in q[0-9]k*_*) tflags=$GROUP_FLAGS_avx512 ;; esac
            [ $zig = 1 ] && [ -n "$tflags" ] && tflags=${GROUP_ZIGFLAGS_avx512-$tflags}
            # shellcheck disable=SC2086 # tflags is a list
            "$ccfn" "${extra[@]}" "${CFLAGS[@]}" "${defs[@]}" $tflags -c "$src" -o "$o"
            testing+=("$o")
        done
    fi
    local drv more ddefs
    for drv in if_native_test attn_native_test detmath_test q4_native_test; do
        o="$obj/$drv.o"
        more=() ddefs=()
        [ "$x86" = 1 ] && ddefs=(-DIF_X86_TIERS=1)
        if [ "$drv" = detmath_test ]; then more=("${lanes[@]}"); fi
        if [ "$drv" = if_native_test ]; then more=("${testing[@]}"); fi
        "$ccfn" "${extra[@]}" "${CFLAGS[@]}" "${ddefs[@]}" -c "tests/native/$drv.c" -o "$o"
        "$ccfn" "${extra[@]}" -o "$OUT/$drv-$name" "${objs[@]}" "${more[@]}" "$o" "${LIBS[@]}"
        echo "built $OUT/$drv-$name" >&2
    done
    rm -rf "$obj"
}

sys_cc() { ${CC:-cc} "$@"; }

host=$(uname -m)
x86_tiers=0
if [ "$host" = x86_64 ] && [ "${ISAFORGE_NATIVE_X86_TIERS:-1}" != 0 ]; then x86_tiers=1; fi

for t in "${TARGETS[@]}"; do
    case $t in
    aarch64) build aarch64 0 zig_cc -target aarch64-linux-musl -static ;;
    native) build native "$x86_tiers" sys_cc ;;
    x86_64-musl) build x86_64-musl "$x86_tiers" zig_cc -target x86_64-linux-musl -static ;;
    *)
        echo "build.sh: unknown target '$t' (aarch64, native, x86_64-musl)" >&2
        exit 2
        ;;
    esac
done
