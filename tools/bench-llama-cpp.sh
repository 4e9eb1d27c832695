#!/usr/bin/env bash
# llama.cpp and specd side by side on the same GGUF files in one run (a
# benchmark, not a test): pp128, tg128 and greedy speculative decoding.
# llama.cpp is node-llama-cpp's prebuilt CPU binary from npm (installed once
# into ~/.cache/specd, as for the interop test).
#   tools/bench-llama-cpp.sh [THREADS=2] [REPETITIONS=5]
#
# --native: llama.cpp built natively from the bundled source instead
# (tools/build-llama-cpp-native.sh; llama-bench and llama-speculative-simple),
# pp512 / tg128 of each FILE and, with --spec, greedy speculative decoding of
# TARGET with DRAFT by both (issue 33's goal table):
#   tools/bench-llama-cpp.sh --native [THREADS=2] [REPETITIONS=5] FILE.gguf... [--spec TARGET DRAFT]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
models=${SPECD_MODELS_DIR:-$root/models}
if [ "${1:-}" = --native ]; then
  shift
  threads=${1:-2} reps=${2:-5}
  shift $(( $# >= 2 ? 2 : $# ))
  llama_bin=$("$root/tools/build-llama-cpp-native.sh")
  exec "$root/tests/support/node_run.sh" "$root/tests/engine/llama_cpp" bench_native.mjs \
      "${SPECD_BIN:-$root/build/bin/specd}" "$llama_bin" "$threads" "$reps" "$@"
fi
exec "$root/tests/support/node_run.sh" "$root/tests/engine/llama_cpp" bench_llama_cpp.mjs \
    "${SPECD_BIN:-$root/build/bin/specd}" "$models" "${1:-2}" "${2:-5}"
