#!/usr/bin/env bash
# Configures and builds specd into build/ (Release). Extra arguments go to
# CMake's configure step, e.g. tools/build.sh -DSPECD_SANITIZE=ON.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SPECD_BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-Release} "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
