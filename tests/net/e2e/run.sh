#!/usr/bin/env bash
# Runs one end-to-end client script against a running `specd serve`.
#
#   tests/net/e2e/run.sh ws_client.test.mjs     ws://127.0.0.1:8080
#   tests/net/e2e/run.sh openai_client.test.mjs http://127.0.0.1:8080
#   tests/net/e2e/run.sh chat_page.test.mjs     http://127.0.0.1:8080 chat_page.png
#
# The npm packages (package.json next to this script) are installed once into
# ${SPECD_NPM_CACHE:-$HOME/.cache/specd/e2e}, never into the source tree, and
# reinstalled when package.json changes. ESM imports ignore NODE_PATH, so the
# scripts are copied into a scratch folder inside that cache and run from
# there (from the caller's working directory, so relative paths in the
# arguments keep working): Node finds the cache's node_modules by walking up
# from the script's own folder.
# Exit codes: the script's own; 77 (ctest: skipped) when node or npm is missing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ $# -lt 1 ]]; then
    echo "usage: $0 SCRIPT.test.mjs URL [args...]" >&2
    exit 2
fi
script="$(basename "$1")"
shift
if [[ ! -f "$here/$script" ]]; then
    echo "run.sh: no such test script: $here/$script" >&2
    exit 2
fi
for tool in node npm; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "run.sh: $tool not installed, skipping $script" >&2
        exit 77
    fi
done

cache="${SPECD_NPM_CACHE:-$HOME/.cache/specd/e2e}"
mkdir -p "$cache"

# One installer at a time (ctest -j runs several of these at once).
exec 9>"$cache/.lock"
flock 9
if [[ ! -d "$cache/node_modules" ]] || ! cmp -s "$here/package.json" "$cache/package.json"; then
    echo "run.sh: installing npm packages into $cache" >&2
    cp "$here/package.json" "$cache/package.json"
    rm -f "$cache/package-lock.json"
    if ! (cd "$cache" && npm install --no-audit --no-fund --loglevel=error >&2); then
        rm -f "$cache/package.json"   # retry next time
        echo "run.sh: npm install failed in $cache" >&2
        exit 1
    fi
fi
flock -u 9
exec 9>&-

scratch="$(mktemp -d "$cache/run.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
cp "$here"/*.mjs "$scratch/"
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
