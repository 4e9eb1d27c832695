#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/fuzz_*.cpp) with clang-14 (ASan+UBSan)
# in build-fuzz/ and runs each for N seconds (default 60) from its seed
# corpus fuzz/corpus/NAME/, with the dictionary fuzz/dict/NAME.dict when
# there is one. Prints each target's executions; on a finding prints the
# fuzzer's report, keeps the input as build-fuzz/findings/NAME-crash-*, goes
# on with the other targets and exits non-zero at the end.
#   tools/fuzz.sh [SECONDS] [TARGET...]     e.g. tools/fuzz.sh 600 fuzz_request
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
[ "$seconds" -gt 0 ] || { echo "fuzz: skipped"; exit 0; }
shift || true
build=$root/build-fuzz
# No CUDA: the targets are CPU code, and nvcc need not accept clang as its host compiler.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCMAKE_C_COMPILER=clang-14 -DSPECD_BUILD_FUZZ=ON -DSPECD_BUILD_TESTS=OFF -DSPECD_CUDA=OFF >/dev/null
if [ $# -gt 0 ]; then
  targets="$*"
else
  targets=$(cd "$root/fuzz" && ls fuzz_*.cpp 2>/dev/null | sed 's/\.cpp$//')
fi
# shellcheck disable=SC2086
cmake --build "$build" -j "$(nproc)" --target $targets
mkdir -p "$build/findings"
failed=""
for t in $targets; do
  name=${t#fuzz_}
  work=$(mktemp -d)
  log=$(mktemp)
  [ -d "$root/fuzz/corpus/$name" ] && cp -r "$root/fuzz/corpus/$name"/. "$work"/
  dict=()
  [ -f "$root/fuzz/dict/$name.dict" ] && dict=(-dict="$root/fuzz/dict/$name.dict")
  echo "fuzz: $t for ${seconds}s"
  if "$build/bin/$t" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$build/findings/$name-" \
      "${dict[@]}" "$work" >"$log" 2>&1; then
    # "Done 123456 runs in 20 second(s)" and the corpus size at the end.
    grep -E '^Done [0-9]+ runs' "$log" || true
    grep -E '^stat::(number_of_executed_units|new_units_added|peak_rss_mb)' "$log" | tr '\n' ' '
    echo
  else
    echo "fuzz: FINDING in $t:"
    grep -v -E '^#[0-9]+|^INFO:' "$log" | tail -n 60
    failed="$failed $t"
  fi
  rm -rf "$work" "$log"
done
if [ -n "$failed" ]; then
  echo "fuzz: findings in$failed (inputs in $build/findings/)"
  exit 1
fi
echo "fuzz: no findings"
