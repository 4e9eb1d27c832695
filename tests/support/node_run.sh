#!/usr/bin/env bash
# Runs a Node test script with the npm packages its folder's package.json
# names, installed once into ${SPECD_NPM_CACHE_ROOT:-$HOME/.cache/specd}/NAME
# (never into the source tree) and reinstalled when package.json changes.
# Optional dependencies are not installed.
#
#   tests/support/node_run.sh tests/engine/llama_cpp interop.test.mjs ARGS...
#
# ESM imports ignore NODE_PATH, so the folder's *.mjs are copied into a
# scratch folder inside the cache and run from there: Node finds the cache's
# node_modules by walking up from the script's own folder.
# Exit codes: the script's own; 77 (ctest: skipped) when node or npm is missing.
set -euo pipefail

if [[ $# -lt 2 ]]; then
    echo "usage: $0 PACKAGE_DIR SCRIPT.mjs [args...]" >&2
    exit 2
fi
package_dir="$(cd "$1" && pwd)"
script="$(basename "$2")"
shift 2
if [[ ! -f "$package_dir/$script" || ! -f "$package_dir/package.json" ]]; then
    echo "node_run.sh: $package_dir needs package.json and $script" >&2
    exit 2
fi
for tool in node npm; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "node_run.sh: $tool not installed, skipping $script" >&2
        exit 77
    fi
done

name=$(node -p "require('$package_dir/package.json').name")
cache="${SPECD_NPM_CACHE_ROOT:-$HOME/.cache/specd}/$name"
mkdir -p "$cache"

# One installer at a time (ctest -j may start several users of one cache).
exec 9>"$cache/.lock"
flock 9
if [[ ! -d "$cache/node_modules" ]] || ! cmp -s "$package_dir/package.json" "$cache/package.json"; then
    echo "node_run.sh: installing npm packages into $cache" >&2
    cp "$package_dir/package.json" "$cache/package.json"
    rm -f "$cache/package-lock.json"
    # Optional dependencies are left out: node-llama-cpp would pull every
    # platform's prebuilt binaries (730 MB); package.json names the one used.
    if ! (cd "$cache" && npm install --no-audit --no-fund --loglevel=error --omit=optional >&2); then
        rm -f "$cache/package.json"   # retry next time
        echo "node_run.sh: npm install failed in $cache" >&2
        exit 1
    fi
fi
flock -u 9
exec 9>&-

scratch="$(mktemp -d "$cache/run.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
cp "$package_dir"/*.mjs "$scratch/"
# Not exec, so that the trap removes the scratch copy; a TERM (ctest's
# timeout) or INT is passed on to node.
set +e
node "$scratch/$script" "$@" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null' TERM INT
wait "$child"
rc=$?
while kill -0 "$child" 2>/dev/null; do wait "$child"; rc=$?; done
exit "$rc"
