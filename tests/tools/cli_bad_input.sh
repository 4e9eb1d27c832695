#!/usr/bin/env bash
# `specd info` on stories15M and on written family models (the summary and
# the metadata/tensor table), and the CLI's bad input (issue 32): an
# unsupported architecture (the supported ones listed), a missing or
# mis-shaped tensor (named), an incompatible draft (the first differing
# token), a BPE vocabulary without merges, a pre-tokenizer never seen
# (refused, as llama.cpp refuses it), a file that is not GGUF and one that is
# missing: each exits 1 with one line on stderr, no crash.
# Usage: cli_bad_input.sh SPECD_BINARY CLI_MODELS_BINARY MODELS_DIR
set -uo pipefail
specd=$1
cli_models=$2
models=${SPECD_MODELS_DIR:-$3}  # the environment wins, as for the unit tests
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$cli_models" "$dir" "$models/stories15M-f32.gguf" || fail "cli_models exited $?"

# expect_line NEEDLE: the last command's stdout in $dir/out contains it.
has() { grep -qF -- "$1" "$dir/out" || { cat "$dir/out"; fail "info output lacks: $1"; }; }

"$specd" info "$models/stories15M-f32.gguf" >"$dir/out" 2>"$dir/err" || fail "info stories15M exited $?"
for s in "architecture: llama" "parameters: 15.19M (f32 weights" "layers: 6, width 288" "attention: 6 heads, 6 KV heads, head size 48" \
         "context: trained 256" "default context: 256 on this machine: the trained 256 (KV_CACHE_RATIO" \
         "RoPE: base 10000, NORM pairing" "vocabulary: SPM (tokenizer.ggml.model 'llama'), 32000 tokens" \
         "special tokens: BOS 1 '<s>' (added), EOS 2 '</s>', EOT none" "end of generation: 2 '</s>'" \
         "chat template: plain" "tensor types: f32 x" "metadata (" "tensors ("; do has "$s"; done
"$specd" info --brief "$models/stories15M-f32.gguf" >"$dir/out" 2>"$dir/err" || fail "info --brief exited $?"
has "architecture: llama"
grep -qF "metadata (" "$dir/out" && fail "--brief printed the metadata table"
echo "ok: info stories15M"

"$specd" info "$dir/qwen2.gguf" >"$dir/out" 2>"$dir/err" || fail "info qwen2 exited $?"
for s in "architecture: qwen2 (" "NEOX pairing (i, i + n/2)" "base 1e+06" "attention: 4 heads, 2 KV heads, head size 16" \
         "output: tied to the token embedding" "tensor types: f32 x"; do has "$s"; done
"$specd" info --brief "$dir/gemma3.gguf" >"$dir/out" 2>"$dir/err" || fail "info gemma3 exited $?"
for s in "architecture: gemma3 (" "sliding window: 4 positions on 2 of 3 layers, RoPE base 10000 there" \
         "linear scaling x8" "logit soft-cap: 30" "(GeGLU)"; do has "$s"; done
echo "ok: info on written qwen2 and gemma3 models"

# expect_error NEEDLE CMD...: exit 1, exactly one line on stderr, containing NEEDLE.
expect_error() {
    local needle=$1
    shift
    "$@" >/dev/null 2>"$dir/err"
    local rc=$?
    [ "$rc" -eq 1 ] || { cat "$dir/err"; fail "$* exited $rc, expected 1"; }
    local lines
    lines=$(wc -l <"$dir/err")
    [ "$lines" -eq 1 ] || { cat "$dir/err"; fail "$*: $lines lines on stderr, expected 1"; }
    grep -qF -- "$needle" "$dir/err" || { cat "$dir/err"; fail "$*: stderr lacks: $needle"; }
    echo "ok: $(cat "$dir/err")"
}
gen=(generate -p "Once upon a time" -n 4 -t 1 --device cpu)  # (auto on a machine without a GPU says so on stderr)
expect_error "unsupported architecture 'gpt2'" "$specd" info "$dir/bad-arch.gguf"
expect_error "llama, qwen2, qwen3, gemma3, phi3" "$specd" "${gen[@]}" -m "$dir/bad-arch.gguf"
expect_error "missing tensor 'blk.0.attn_q_norm.weight'" "$specd" info "$dir/missing-tensor.gguf"
expect_error "missing tensor 'blk.0.attn_q_norm.weight'" "$specd" "${gen[@]}" -m "$dir/missing-tensor.gguf"
expect_error "tensor 'blk.1.attn_k.bias' has shape [16], the metadata implies [32]" "$specd" info "$dir/misshaped-tensor.gguf"
expect_error "token 1000 is '▁changedtoken' in the draft but '" "$specd" "${gen[@]}" -m "$models/stories15M-f32.gguf" \
    --model-draft "$dir/draft-text.gguf"
expect_error "tokenizer.ggml.merges is missing" "$specd" info "$dir/bpe-no-merges.gguf"
expect_error "tokenizer.ggml.merges is missing" "$specd" "${gen[@]}" -m "$dir/bpe-no-merges.gguf"
expect_error "unknown pre-tokenizer \"never-seen\" (tokenizer.ggml.pre; llama.cpp refuses it too)" "$specd" info "$dir/unknown-pre.gguf"
expect_error "unknown pre-tokenizer \"never-seen\"" "$specd" "${gen[@]}" -m "$dir/unknown-pre.gguf"
head -c 4096 /dev/urandom >"$dir/noise.gguf"
expect_error "noise.gguf" "$specd" info "$dir/noise.gguf"
expect_error "missing.gguf" "$specd" info "$dir/missing.gguf"
expect_error "missing.gguf" "$specd" "${gen[@]}" -m "$dir/missing.gguf"
echo "PASS"
