#!/usr/bin/env bash
# One-command set-up: build and install isaforge (editable, with the test tools), then the
# cross toolchain the emulated Arm tests use (zig cc from PyPI, qemu-aarch64 >= 10.1 from
# Debian unstable unpacked into a cache folder; see scripts/arm_toolchain.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
python3 -m pip install -e ".[test]"
if ! bash scripts/arm_toolchain.sh >/dev/null; then
    echo "setup: the Arm cross toolchain could not be installed; the emulated Arm tests will" \
         "be skipped (run scripts/arm_toolchain.sh to see why)" >&2
fi
echo "setup: done. Try: isaforge info"
