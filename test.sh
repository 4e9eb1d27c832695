#!/usr/bin/env bash
# The whole test suite: install what is needed, build, fetch the model, run
# every Catch2 test through ctest, then the short fuzz runs.
#   SPECD_SANITIZE=1  build in build-asan/ with ASan+UBSan instead
#   SPECD_FUZZ_SECONDS  seconds per fuzz target (default 20; 0 skips)
set -euo pipefail
root=$(cd "$(dirname "$0")" && pwd)
"$root/tools/install-deps.sh"
"$root/tools/build.sh"
"$root/tools/fetch-model.sh"
"$root/tools/fetch-llama-cpp-vocab.sh"   # llama.cpp's vocabulary files and tokenizer test vectors
build=$root/build
if [ "${SPECD_SANITIZE:-0}" = 1 ]; then
  build=$root/build-asan
  SPECD_BUILD_DIR=$build CMAKE_BUILD_TYPE=RelWithDebInfo "$root/tools/build.sh" -DSPECD_SANITIZE=ON
fi
export SPECD_MODELS_DIR=${SPECD_MODELS_DIR:-$root/models}
(cd "$build" && ctest --output-on-failure -j "$(nproc)" --timeout 900)
"$root/tools/fuzz.sh" "${SPECD_FUZZ_SECONDS:-20}"
