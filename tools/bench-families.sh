#!/usr/bin/env bash
# The model families at real 1B-class shapes (random weights, llama.cpp's
# converter layout, the real vocabularies), plain decoding by llama.cpp and
# specd side by side in one run: a benchmark, not a test (issue 32's
# "Measure and report"). The TinyLlama-1.1B shape is the Llama 2 path of the
# same size; compare the GB/s columns across shapes.
#   tools/bench-families.sh [THREADS=2] [REPETITIONS=5] [TYPES="q8_0"]
#   SPECD_BENCH_DIR   where the model files go (default ~/.cache/specd/bench-families;
#                     ~1.2-1.9 GB per q8_0 file, written once)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
threads=${1:-2} reps=${2:-5} types=${3:-q8_0}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/specd
dir=${SPECD_BENCH_DIR:-$cache/bench-families}
vocab=${SPECD_LLAMA_VOCAB_DIR:-$cache/llama-cpp-vocab-3.22.1}
build=${SPECD_BUILD_DIR:-$root/build}
say() { echo "bench-families: $*" >&2; }

"$root/tools/fetch-llama-cpp-vocab.sh"
cmake --build "$build" --target specd llama_cpp_family_models >/dev/null
mkdir -p "$dir"

# name preset vocabulary dim layers ffn heads kv_heads (the published configs)
shapes=(
  "tinyllama-1.1b llama2 llama-spm 2048 22 5632 32 4"
  "llama-3.2-1b   llama3 llama-bpe 2048 16 8192 32 8"
  "qwen2.5-0.5b   qwen2  qwen2     896  24 4864 14 2"
  "qwen2.5-1.5b   qwen2  qwen2     1536 28 8960 12 2"
)
files=()
for line in "${shapes[@]}"; do
  read -r name preset voc dim layers ffn heads kv <<<"$line"
  f16=$dir/$name-f16.gguf
  if [ ! -s "$f16" ]; then
    say "writing $f16"
    "$build/bin/llama_cpp_family_models" write-shape "$f16.tmp" "$vocab/ggml-vocab-$voc.gguf" \
      "$preset" "$dim" "$layers" "$ffn" "$heads" "$kv" f16
    mv "$f16.tmp" "$f16"
  fi
  for type in $types; do
    out=$dir/$name-$type.gguf
    if [ "$type" != f16 ] && [ ! -s "$out" ]; then
      say "quantizing $out"
      "$build/bin/specd" quantize "$f16" "$out.tmp" "$type" && mv "$out.tmp" "$out"
    fi
    files+=("$out")
  done
done
exec "$root/tests/support/node_run.sh" "$root/tests/engine/llama_cpp" bench_llama_cpp.mjs \
    "$build/bin/specd" "$dir" "$threads" "$reps" "${files[@]}"
