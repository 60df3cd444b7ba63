#!/usr/bin/env bash
# build_q4_simde.sh OUT_DIR SIMDE_INCLUDE_DIR - test-only build of the AVX-512 VNNI 4-bit kernels
# for CPUs without AVX-512 (tests/test_q4_avx512_simde.py):
#   OUT_DIR/q4_simde_test   q4_native_test.c with -DIF_Q4_SIMDE, linked with the native kernel
#                           core (every tier file with its own flags, as build.sh native) and the
#                           two kernel files compiled once more WITHOUT AVX-512 flags, their
#                           intrinsics from SIMDe (tests/native/simde_avx512_shim.h, -include),
#                           the descriptors and run functions renamed with a _simde suffix: the
#                           driver runs them as the table "avx512_vnni_simde" on any x86-64 CPU.
#   OUT_DIR/real-NAME.o     the same two files compiled with the real avx512 group flags (for the
#                           instruction check by objdump).
# SIMDE_INCLUDE_DIR holds simde/x86/avx512.h (scripts/simde.sh provides it). x86-64 only.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 OUT_DIR SIMDE_INCLUDE_DIR" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$1"
OUT=$(cd "$1" && pwd)
SIMDE=$(cd "$2" && pwd)
cd "$ROOT"
manifest=$(python3 csrc/manifest.py --shell --header "$OUT/generated/if_kernel_decls.h")
eval "$manifest"
CC=${CC:-cc}
CFLAGS=(-O3 -std=c11 -ffp-contract=off -fno-fast-math -Wall -Wextra -Icsrc/include
        "-I$OUT/generated" -D_DEFAULT_SOURCE -DIF_X86_TIERS=1)
KERNELS=(q4_gemv/q4_gemv_1x16_avx512_vnni q4_gemm/q4_gemm_8x16_avx512_vnni)
obj="$OUT/obj"
rm -rf "$obj"
mkdir -p "$obj"
# the kernel core, as build.sh native (x86 groups with their flags, no Arm groups); two jobs
objs=()
running=0
for entry in "${SOURCES[@]}"; do
    group=${entry%% *}
    src=${entry#* }
    eval "arch=\$GROUP_ARCH_$group flags=\$GROUP_FLAGS_$group"
    [ "$arch" = arm ] && continue
    o="$obj/$(echo "$src" | tr / _).o"
    # shellcheck disable=SC2086 # flags is a list
    "$CC" "${CFLAGS[@]}" $flags -c "$src" -o "$o" &
    objs+=("$o")
    running=$((running + 1))
    if [ $running -ge 2 ]; then
        wait -n
        running=$((running - 1))
    fi
done
while [ $running -gt 0 ]; do
    wait -n
    running=$((running - 1))
done
for k in "${KERNELS[@]}"; do
    name=$(basename "$k")
    run=if_${name}
    # shellcheck disable=SC2086 # the group's flags are a list
    "$CC" "${CFLAGS[@]}" $GROUP_FLAGS_avx512 -c "csrc/kernels/$k.c" -o "$OUT/real-$name.o"
    "$CC" "${CFLAGS[@]}" -O1 -Wno-psabi "-I$SIMDE" -include tests/native/simde_avx512_shim.h \
        "-Dif_k_${name}=if_k_${name}_simde" "-D${run}=${run}_simde" \
        -c "csrc/kernels/$k.c" -o "$obj/simde-$name.o"
    objs+=("$obj/simde-$name.o")
done
# the driver as build.sh compiles it (it defines _DEFAULT_SOURCE itself)
drvflags=()
for f in "${CFLAGS[@]}"; do [ "$f" = -D_DEFAULT_SOURCE ] || drvflags+=("$f"); done
"$CC" "${drvflags[@]}" -DIF_Q4_SIMDE -c tests/native/q4_native_test.c -o "$obj/q4_native_test.o"
"$CC" -o "$OUT/q4_simde_test" "${objs[@]}" "$obj/q4_native_test.o" -lm -lpthread
rm -rf "$obj"
echo "built $OUT/q4_simde_test" >&2
