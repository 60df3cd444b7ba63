#!/usr/bin/env bash
# Install the peers `isaforge bench` compares against, into the current Python environment:
#   llama-cpp-python, built from source for THIS CPU's features with GGML_NATIVE=OFF and
#   explicit flags (so the build says what it uses), AMX off unless the CPU has it;
#   torch (CPU wheel) only with --torch (large download).
#   --disable=f1,f2 builds llama.cpp as if the CPU lacked those /proc/cpuinfo features (e.g.
#   avx512f,avx512_vnni,avx_vnni for an AVX2 peer), the peer of a run with the same features
#   in ISAFORGE_DISABLE_FEATURES.
# Usage: bash scripts/install_peers.sh [--torch] [--dry-run] [--disable=f1,f2]
set -euo pipefail

PY=${PYTHON:-python3}
torch=0
dry=0
disabled=","
for a in "$@"; do
  case "$a" in
    --torch) torch=1 ;;
    --dry-run) dry=1 ;;
    --disable=*) disabled=",${a#--disable=}," ;;
    *) echo "install_peers.sh: unknown option $a (--torch, --dry-run, --disable=f1,f2)" >&2
       exit 2 ;;
  esac
done

flags=""
has() {
  case "$disabled" in *",$1,"*) return 1 ;; esac
  grep -qw "$1" /proc/cpuinfo 2>/dev/null
}
onoff() { if has "$1"; then echo ON; else echo OFF; fi; }
if [ "$(uname -m)" = "x86_64" ]; then
  flags="-DGGML_NATIVE=OFF -DGGML_AVX=$(onoff avx) -DGGML_AVX2=$(onoff avx2)"
  flags="$flags -DGGML_FMA=$(onoff fma) -DGGML_F16C=$(onoff f16c)"
  flags="$flags -DGGML_AVX512=$(onoff avx512f) -DGGML_AVX512_VNNI=$(onoff avx512_vnni)"
  flags="$flags -DGGML_AVX_VNNI=$(onoff avx_vnni)"
  amx=$(onoff amx_int8)
  flags="$flags -DGGML_AMX_TILE=$amx -DGGML_AMX_INT8=$amx -DGGML_AMX_BF16=$(onoff amx_bf16)"
else
  flags="-DGGML_NATIVE=ON"  # Arm and others: let ggml detect the host
fi

echo "llama-cpp-python: CMAKE_ARGS=\"$flags\""
if [ "$dry" = 1 ]; then exit 0; fi
CMAKE_ARGS="$flags" FORCE_CMAKE=1 "$PY" -m pip install --no-cache-dir --no-binary llama-cpp-python \
  llama-cpp-python
"$PY" -c "import llama_cpp; print('llama_cpp', llama_cpp.__version__)"

if [ "$torch" = 1 ]; then
  "$PY" -m pip install torch --index-url https://download.pytorch.org/whl/cpu
  "$PY" -c "import torch; print('torch', torch.__version__)"
fi
