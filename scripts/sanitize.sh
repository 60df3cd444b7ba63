#!/usr/bin/env bash
# sanitize.sh [OUT_DIR] - build the C core and the extension with AddressSanitizer and
# UndefinedBehaviorSanitizer (-fsanitize=address,undefined, UB fatal) into OUT_DIR (default
# build-sanitize, outside build/ so the tier tests never read its objects), install it in a venv
# there (not over the editable install), and run the kernel, forward-pass, hostile-header and
# fuzz-corpus tests against that build. Any out-of-bounds access, use after free or undefined
# behaviour in C aborts the run with a report. PYTEST_ARGS overrides the test selection;
# pytest captures only sys.stdout/stderr, so a sanitizer report (written to fd 2 before the
# abort) reaches the log. CI runs this after the test suite (.ci/run).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/build-sanitize}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SAN="-g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
export PIP_DISABLE_PIP_VERSION_CHECK=1
rm -rf "$OUT/wheel" "$OUT/venv"
python3 -m pip wheel -q --no-deps --no-build-isolation -w "$OUT/wheel" "$ROOT" \
    -C "build-dir=$OUT/build" -C install.strip=false \
    -C "cmake.define.CMAKE_C_FLAGS=$SAN" \
    -C "cmake.define.CMAKE_SHARED_LINKER_FLAGS=-fsanitize=address,undefined" \
    -C "cmake.define.CMAKE_MODULE_LINKER_FLAGS=-fsanitize=address,undefined"
# A venv without the system site-packages holds the sanitized build; a .pth line then appends
# the system site-packages (numpy, pytest, ...) without running its .pth files, so the editable
# install's import hook stays out, also in the subprocesses tests start with sys.executable.
python3 -m venv --without-pip "$OUT/venv"
VSITE=$("$OUT/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
SITE=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$SITE" >"$VSITE/zz_system_site.pth"
python3 -m pip install -q --no-deps --target "$VSITE" "$OUT"/wheel/isaforge-*.whl
SO=$(ls "$VSITE"/isaforge/_native*.so)
SYMS=$(nm -D -u "$SO")
[[ $SYMS == *__asan_report* ]] || { echo "sanitize.sh: $SO is not instrumented" >&2; exit 1; }

CC=${CC:-cc}
PRELOAD="$($CC -print-file-name=libasan.so) $($CC -print-file-name=libubsan.so)"
cd "$ROOT"
# the tests that drive the C core hardest: every kernel on the shape grid (with guard pages), the
# forward pass and prefill, attention, hostile headers, the fuzz corpora and their mutants
DEFAULT_SEL="tests/test_kernels.py tests/test_native.py tests/test_prefill.py
    tests/test_attention.py tests/test_strict.py tests/test_fuzz.py"
# shellcheck disable=SC2206 # word splitting of the test list is intended
SEL=(${PYTEST_ARGS:-$DEFAULT_SEL})
echo "sanitize.sh: running ${SEL[*]} against $SO" >&2
LD_PRELOAD="$PRELOAD" \
    ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:allocator_may_return_null=1" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" ISAFORGE_SANITIZED=1 \
    "$OUT/venv/bin/python" -m pytest -q -p no:cacheprovider --capture=sys -x \
    --durations=5 -k "not coverage_guided" "${SEL[@]}"
