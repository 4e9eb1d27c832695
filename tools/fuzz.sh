#!/usr/bin/env bash
# Builds the libFuzzer targets with clang-14 (ASan+UBSan) and runs each for
# N seconds (default 60) from its seed corpus. Exit non-zero on any finding.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
[ "$seconds" -gt 0 ] || { echo "fuzz: skipped"; exit 0; }
build=$root/build-fuzz
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCMAKE_C_COMPILER=clang-14 -DSPECD_BUILD_FUZZ=ON -DSPECD_BUILD_TESTS=OFF >/dev/null
targets=$(cd "$root/fuzz" && ls fuzz_*.cpp 2>/dev/null | sed 's/\.cpp$//')
# shellcheck disable=SC2086
cmake --build "$build" -j "$(nproc)" --target $targets
for t in $targets; do
  corpus=$root/fuzz/corpus/${t#fuzz_}
  work=$(mktemp -d)
  [ -d "$corpus" ] && cp -r "$corpus"/. "$work"/
  echo "fuzz: $t for ${seconds}s"
  "$build/bin/$t" -max_total_time="$seconds" -print_final_stats=0 "$work" 2>&1 | tail -3
  rm -rf "$work"
done
echo "fuzz: no findings"
