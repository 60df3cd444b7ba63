#!/usr/bin/env bash
# build.sh OUT_DIR [TARGET...] - build the native test drivers (if_native_test.c and
# attn_native_test.c) from csrc/.
#
# TARGET (default: aarch64):
#   aarch64      static aarch64-linux-musl binary with Zig's clang ($ISAFORGE_ZIG_CC, else
#                `python3 -m ziglang cc`); portable sources only (no IF_X86_TIERS). Run it
#                with qemu-aarch64 (scripts/arm_toolchain.sh provides both).
#   native       this machine's `cc` (or $CC) against the system libc, with the x86 tier files
#                (each with its own ISA flags, as CMakeLists.txt) when the host is x86-64.
#   x86_64-musl  static x86_64-linux-musl binary with Zig: same sources as `native` on x86-64
#                but musl's libm, to tell a libm difference from an architecture difference.
# Writes OUT_DIR/if_native_test-TARGET, OUT_DIR/attn_native_test-TARGET (and, for aarch64, OUT_DIR/asm-aarch64/*.s: the
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
# Shared code and the scalar kernels: everything that builds on any architecture.
PORTABLE=(csrc/forward.c csrc/ops.c csrc/detmath.c csrc/sampler.c csrc/threadpool.c csrc/cpu/features.c
    csrc/cpu/dispatch.c)
PORTABLE+=($(ls csrc/kernels/*/*_scalar.c | sort))
# x86 tiers, one translation unit per ISA and op, with the flags CMakeLists.txt gives them.
K=csrc/kernels
X86_FLAGS_avx2="-mavx2 -mfma"
X86_FLAGS_avx_vnni="-mavx2 -mfma -mavxvnni"
X86_FLAGS_avx512="-mavx512f -mavx512bw -mavx512vl -mavx512vnni -mfma"
X86_FLAGS_amx="-mamx-tile -mamx-int8 -mavx512f -mavx512bw -mavx512vl -mfma"
X86_SOURCES=(
    "$K/quantize/quantize_q8_avx2.c:avx2" "$K/q8_gemv/q8_gemv_1x8_avx2.c:avx2"
    "$K/q8_gemm/q8_gemm_4x16_avx2.c:avx2" "$K/swiglu/swiglu_avx2.c:avx2"
    "$K/attention/attn_f32_avx2.c:avx2"
    "$K/q8_gemv/q8_gemv_1x8_avx_vnni.c:avx_vnni" "$K/q8_gemm/q8_gemm_4x16_avx_vnni.c:avx_vnni"
    "$K/quantize/quantize_q8_avx512.c:avx512" "$K/q8_gemv/q8_gemv_1x16_avx512_vnni.c:avx512"
    "$K/q8_gemm/q8_gemm_4x32_avx512_vnni.c:avx512"
    "$K/q8_gemm/q8_gemm_16x16_amx.c:amx" "$K/q8_gemm/q8_gemm_16x16_amx_pack.c:"
    "$K/attention/attn_f32_avx512.c:avx512" "$K/swiglu/swiglu_avx512.c:avx512"
    "$K/attention/attn_i8_amx.c:amx" "$K/attention/attn_i8_amx_emulated.c:"
)
# Arm tiers, likewise (aarch64 target only; zig cc spells -march=armv8.2-a+dotprod as
# -mcpu=generic+dotprod)
ARM_FLAGS_neon="-mcpu=generic"
ARM_FLAGS_dotprod="-mcpu=generic+dotprod"
ARM_FLAGS_i8mm="-mcpu=generic+dotprod+i8mm"
ARM_FLAGS_sme2="-mcpu=generic+sme2"
ARM_SOURCES=(
    "$K/quantize/quantize_q8_neon.c:neon" "$K/q8_gemv/q8_gemv_1x4_neon.c:neon"
    "$K/q8_gemm/q8_gemm_4x4_neon.c:neon"
    "$K/q8_gemv/q8_gemv_1x4_dotprod.c:dotprod" "$K/q8_gemm/q8_gemm_4x4_dotprod.c:dotprod"
    "$K/q8_gemm/q8_gemm_2x4_i8mm.c:i8mm"
    "$K/q8_gemv/q8_gemv_1xvl_sme2.c:sme2" "$K/q8_gemm/q8_gemm_vlxvl_sme2.c:sme2"
    "$K/sme_abi.c:sme2" "$K/attention/attn_i8_sme2.c:sme2"
)
CFLAGS=(-O3 -std=c11 -ffp-contract=off -fno-fast-math -Wall -Wextra -Icsrc/include)
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
    for src in "${PORTABLE[@]}"; do
        o="$obj/$(echo "$src" | tr / _).o"
        "$ccfn" "${extra[@]}" "${CFLAGS[@]}" "${defs[@]}" -c "$src" -o "$o"
        objs+=("$o")
    done
    if [ "$x86" = 1 ]; then
        local entry set
        for entry in "${X86_SOURCES[@]}"; do
            src=${entry%%:*}
            set=${entry#*:}
            flags=""
            [ -n "$set" ] && eval "flags=\$X86_FLAGS_$set"
            o="$obj/$(echo "$src" | tr / _).o"
            # shellcheck disable=SC2086 # flags is a list
            "$ccfn" "${extra[@]}" "${CFLAGS[@]}" "${defs[@]}" $flags -c "$src" -o "$o"
            objs+=("$o")
        done
    fi
    if [ "$name" = aarch64 ]; then
        local entry set
        for entry in "${ARM_SOURCES[@]}"; do
            src=${entry%%:*}
            set=${entry#*:}
            eval "flags=\$ARM_FLAGS_$set"
            o="$obj/$(echo "$src" | tr / _).o"
            # shellcheck disable=SC2086 # flags is a list
            "$ccfn" "${extra[@]}" "${CFLAGS[@]}" "${defs[@]}" $flags -c "$src" -o "$o"
            objs+=("$o")
            # the assembly of the same compile, for the instruction-count test
            mkdir -p "$OUT/asm-$name"
            # shellcheck disable=SC2086
            "$ccfn" "${extra[@]}" "${CFLAGS[@]}" "${defs[@]}" $flags -S "$src" \
                -o "$OUT/asm-$name/$(basename "$src" .c).s"
        done
    fi
    local drv
    for drv in if_native_test attn_native_test; do
        o="$obj/$drv.o"
        "$ccfn" "${extra[@]}" "${CFLAGS[@]}" -c "tests/native/$drv.c" -o "$o"
        "$ccfn" "${extra[@]}" -o "$OUT/$drv-$name" "${objs[@]}" "$o" "${LIBS[@]}"
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
