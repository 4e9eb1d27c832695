#!/usr/bin/env bash
# llama.cpp and specd side by side on the same GGUF files in one run (a
# benchmark, not a test): pp128, tg128 and greedy speculative decoding.
# llama.cpp is node-llama-cpp's prebuilt CPU binary from npm (installed once
# into ~/.cache/specd, as for the interop test).
#   tools/bench-llama-cpp.sh [THREADS=2] [REPETITIONS=5]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
models=${SPECD_MODELS_DIR:-$root/models}
exec "$root/tests/support/node_run.sh" "$root/tests/engine/llama_cpp" bench_llama_cpp.mjs \
    "${SPECD_BIN:-$root/build/bin/specd}" "$models" "${1:-2}" "${2:-5}"
