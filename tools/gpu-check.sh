#!/usr/bin/env bash
# tools/gpu-check.sh OUTDIR — the CUDA backend's device checks and benchmark
# in one go, for a GPU machine (H200: sm_90) that has CUDA, CMake and a C++
# compiler but none of CAF, Boost, Catch2, CLI11, nlohmann-json or spdlog:
#   1. configures a GPU-only build (-DSPECD_GPU_ONLY=ON: just specd_engine,
#      specd_gpu and the Catch2-free programs gpu_check and gpu_bench) for
#      CMAKE_CUDA_ARCHITECTURES (default 90) into OUTDIR/build,
#   2. runs gpu_check (every kernel against the CPU reference, the forward
#      pass against the CPU logits on stories15M, greedy speculation == plain
#      on the GPU, stream overlap by event timestamps, CUDA-graph replay ==
#      eager launches, and family_forward: a small model of each family
#      (Llama 3, Qwen2, Qwen3, Gemma 3, Phi-3, written with stories15M's
#      vocabulary) against the CPU forward, logits and greedy tokens)
#      → OUTDIR/gpu_check.log, then the whole-model checks
#      again with SPECD_CUDA_GRAPHS=0 → OUTDIR/gpu_check_no_graphs.log and
#      with SPECD_CUDA_GEMV=0 (cuBLAS for every product) → OUTDIR/gpu_check_cublas.log,
#   3. runs gpu_bench (stories15M decode tokens/s with graphs off and on, verify(9)/decode(1) cost,
#      7B-shape random-weights decode and HBM share, 64 sessions spec on/off)
#      → OUTDIR/gpu_bench.md,
#   4. writes OUTDIR/summary.txt. Budget: under 8 minutes on an H200.
# Models: $SPECD_MODELS_DIR or the repository's models/ must hold
# stories15M-f32.gguf; stories15M-q8_0.gguf (the draft) is made from it when
# missing (so only the f32 file has to be carried to the machine).
# Exit status: 0 all passed, 1 a check or the benchmark failed, 2 the build
# failed, 77 no usable CUDA device (nothing measured; the reason is printed).
set -uo pipefail
if [ $# -ne 1 ]; then
  echo "usage: tools/gpu-check.sh OUTDIR" >&2
  exit 64
fi
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
models=${SPECD_MODELS_DIR:-$root/models}
arch=${CMAKE_CUDA_ARCHITECTURES:-90}
build=$out/build
jobs=$(nproc 2>/dev/null || echo 4)
start=$(date +%s)
summary=$out/summary.txt
: >"$summary"
say() { echo "gpu-check: $*" | tee -a "$summary"; }

say "commit $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown), CUDA architectures $arch, models $models"
command -v nvidia-smi >/dev/null && nvidia-smi >"$out/nvidia-smi.txt" 2>&1

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if ! cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DSPECD_GPU_ONLY=ON -DSPECD_CUDA=ON \
     -DSPECD_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES="$arch" >"$out/configure.log" 2>&1; then
  say "configure failed (see configure.log)"; tail -20 "$out/configure.log"; exit 2
fi
if ! cmake --build "$build" -j "$jobs" --target gpu_check gpu_bench >"$out/build.log" 2>&1; then
  say "build failed (see build.log)"; tail -30 "$out/build.log"; exit 2
fi
warnings=$(grep -c "warning" "$out/build.log" || true)
say "built in $(( $(date +%s) - start )) s, $warnings warning lines"

# The draft model, made from the f32 file when it was not carried along.
if [ ! -f "$models/stories15M-q8_0.gguf" ] && [ -f "$models/stories15M-f32.gguf" ]; then
  mkdir -p "$out/models"
  ln -sf "$models/stories15M-f32.gguf" "$out/models/stories15M-f32.gguf"
  "$build/bin/gpu_check" --quantize-q8_0 "$models/stories15M-f32.gguf" "$out/models/stories15M-q8_0.gguf" >>"$summary" 2>&1 || exit 2
  models=$out/models
fi

timeout 240 "$build/bin/gpu_check" --models "$models" >"$out/gpu_check.log" 2>&1
check_rc=$?
cat "$out/gpu_check.log"
if [ $check_rc -eq 77 ]; then
  say "no usable CUDA device: nothing measured ($(grep -o 'no CUDA device.*' "$out/gpu_check.log" | head -1))"
  exit 77
fi
say "gpu_check exit $check_rc after $(( $(date +%s) - start )) s"

# The whole-model checks again under another setting (VAR=VALUE), logged to
# OUTDIR/LOG: a failure only there or only above tells which path is wrong.
rerun_checks() {  # rerun_checks VAR=VALUE LOG WHAT CHECK...
  local setting=$1 log=$2 what=$3
  shift 3
  env "$setting" timeout 120 "$build/bin/gpu_check" --models "$models" "$@" >"$out/$log" 2>&1
  local rc=$?
  cat "$out/$log"
  say "gpu_check with $what exit $rc after $(( $(date +%s) - start )) s"
  [ $check_rc -eq 0 ] && check_rc=$rc
}
# CUDA graphs off: the eager path.
rerun_checks SPECD_CUDA_GRAPHS=0 gpu_check_no_graphs.log "CUDA graphs off" forward_logits greedy_speculative verifier_greedy family_forward
# Every matrix product through cuBLAS: the path of batches over kGemvMaxRows
# rows, checked here at decode sizes too.
rerun_checks SPECD_CUDA_GEMV=0 gpu_check_cublas.log "every product through cuBLAS" forward_logits greedy_speculative cuda_graphs family_forward

timeout 240 "$build/bin/gpu_bench" --models "$models" >"$out/gpu_bench.md" 2>&1
bench_rc=$?
cat "$out/gpu_bench.md"
say "gpu_bench exit $bench_rc after $(( $(date +%s) - start )) s"

if [ $check_rc -ne 0 ] || [ $bench_rc -ne 0 ]; then exit 1; fi
say "all GPU checks passed"
