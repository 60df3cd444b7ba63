#!/usr/bin/env bash
# sanitize.sh [OUT_DIR] - build the C core and the extension with AddressSanitizer and
# UndefinedBehaviorSanitizer (-fsanitize=address,undefined, UB fatal) into OUT_DIR (default
# build/sanitize), install it there (not over the editable install), and run the kernel,
# forward-pass, format-reader and fuzz-corpus tests against that build. Any out-of-bounds
# access, use after free or undefined behaviour in C aborts the test run with a report.
# PYTEST_ARGS overrides the test selection; pytest captures only sys.stdout/stderr so a sanitizer
# report (written to fd 2 before the abort) reaches the log. CI runs this after the test suite (.ci/run).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/build/sanitize}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SAN="-g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
export PIP_DISABLE_PIP_VERSION_CHECK=1
rm -rf "$OUT/wheel" "$OUT/pkg"
python3 -m pip wheel -q --no-deps --no-build-isolation -w "$OUT/wheel" "$ROOT" \
    -C "build-dir=$OUT/build" -C install.strip=false \
    -C "cmake.define.CMAKE_C_FLAGS=$SAN" \
    -C "cmake.define.CMAKE_SHARED_LINKER_FLAGS=-fsanitize=address,undefined" \
    -C "cmake.define.CMAKE_MODULE_LINKER_FLAGS=-fsanitize=address,undefined"
python3 -m pip install -q --no-deps --target "$OUT/pkg" "$OUT"/wheel/isaforge-*.whl
SO=$(ls "$OUT"/pkg/isaforge/_native*.so)
SYMS=$(nm -D -u "$SO")
[[ $SYMS == *__asan_report* ]] || { echo "sanitize.sh: $SO is not instrumented" >&2; exit 1; }

CC=${CC:-cc}
PRELOAD="$($CC -print-file-name=libasan.so) $($CC -print-file-name=libubsan.so)"
SITE=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# python3 -S: no site.py, so the editable install's import hook stays out and `isaforge` is
# the sanitized copy; site-packages comes after it on PYTHONPATH for numpy, pytest and the rest.
cd "$ROOT"
read -r -a SEL <<<"${PYTEST_ARGS:-tests/test_kernels.py tests/test_tiers.py tests/test_native.py
    tests/test_prefill.py tests/test_attention.py tests/test_formats.py tests/test_gguf.py
    tests/test_hf.py tests/test_isaf.py tests/test_selection.py tests/test_fuzz.py}"
echo "sanitize.sh: running ${SEL[*]} against $SO" >&2
LD_PRELOAD="$PRELOAD" PYTHONPATH="$OUT/pkg:$SITE" \
    ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:allocator_may_return_null=1" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" ISAFORGE_SANITIZED=1 \
    python3 -S -m pytest -q -p no:cacheprovider --capture=sys -x -k "not coverage_guided" "${SEL[@]}"
