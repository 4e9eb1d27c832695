#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, builds this consumer
# project against it with find_package(specd), and runs it.
#   build_and_run.sh SPECD_BUILD_DIR MODEL.gguf
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build=$1 model=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$here" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" >/dev/null
"$work/build/specd_consumer" "$model"
