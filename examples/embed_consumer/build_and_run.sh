#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, builds this consumer
# project against it with find_package(specd), and runs it.
#   build_and_run.sh SPECD_BUILD_DIR MODEL.gguf [sanitize]
# "sanitize": the libraries were built with ASan/UBSan; link the consumer so too.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build=$1 model=$2
extra=()
[ "${3:-}" = sanitize ] && extra=(-DCMAKE_CXX_FLAGS=-fsanitize=address,undefined -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$here" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$work/prefix" "${extra[@]}" >/dev/null
cmake --build "$work/build" >/dev/null
"$work/build/specd_consumer" "$model"
