#!/usr/bin/env bash
# Builds llama.cpp natively (GGML_NATIVE=ON: every instruction set this CPU
# has) from the source node-llama-cpp@3.22.1 ships as a git bundle, once,
# into the cache: llama-bench, llama-speculative-simple and llama-quantize,
# the baselines of tools/bench-llama-cpp.sh --native. Prints the bin folder.
#   SPECD_LLAMA_NATIVE_DIR  where (default ${XDG_CACHE_HOME:-~/.cache}/specd/llama-cpp-native)
# Idempotent: a finished build is reused (it is keyed by the bundle's commit
# and this CPU's flags, so a machine with other SIMD units builds again).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=3.22.1
cache=${XDG_CACHE_HOME:-$HOME/.cache}/specd
tarball=$cache/node-llama-cpp-$version.tgz
say() { echo "build-llama-cpp-native: $*" >&2; }
die() { say "error: $*"; exit 1; }

# The vocabulary fetch downloads and checks the same tarball.
"$root/tools/fetch-llama-cpp-vocab.sh" >/dev/null 2>&1 || die "tools/fetch-llama-cpp-vocab.sh failed (run it to see why)"
[ -s "$tarball" ] || die "$tarball is missing"
commit=$(cat "$cache/llama-cpp-vocab-$version/llama.cpp-commit")
cpu=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx|avx2|fma|f16c|avx512[a-z_]*|amx[a-z_]*)$' | sort | tr '\n' ' ' | sha256sum | cut -c1-12)
dir=${SPECD_LLAMA_NATIVE_DIR:-$cache/llama-cpp-native}/${commit:0:12}-$cpu-noamx
bin=$dir/build/bin
targets=(llama-bench llama-speculative-simple llama-quantize)

if [ -f "$dir/.complete" ]; then
  echo "$bin"
  exit 0
fi
for tool in git tar cmake ninja g++; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed (tools/install-deps.sh)"
done
mkdir -p "$dir"
if [ ! -d "$dir/src/.git" ]; then
  say "[1/2] unpacking llama.cpp $commit"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  tar -xzf "$tarball" -C "$work" package/llama/gitRelease.bundle || die "$tarball is damaged (delete it and run again)"
  rm -rf "$dir/src"
  git clone -q "$work/package/llama/gitRelease.bundle" "$dir/src" 2>/dev/null || die "git clone of the bundle failed"
fi
say "[2/2] building ${targets[*]} (GGML_NATIVE=ON; ~10-20 minutes on 2 cores, once)"
# AMX off: where the CPU lists AMX but the VM does not let a process use the
# tile registers, ggml's AMX matmul crashes (SIGSEGV in ggml_backend_amx_mul_mat).
cmake -S "$dir/src" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
  -DCMAKE_C_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" -DCMAKE_CXX_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DBUILD_SHARED_LIBS=OFF >"$dir/configure.log" 2>&1 \
  || die "configure failed (see $dir/configure.log)"
cmake --build "$dir/build" -j "$(nproc)" --target "${targets[@]}" >"$dir/build.log" 2>&1 \
  || die "build failed (see $dir/build.log)"
touch "$dir/.complete"
echo "$bin"
