#!/usr/bin/env bash
# Soak test: mixed load for DURATION_S seconds against `specd serve`, then
# checks that every request ended in a result or a clear error, the KV cache
# is empty again, RSS stayed flat after the warm-up, /health still answers,
# and (for a server this script started) SIGTERM stops it with exit 0.
#
#   tools/soak.sh 600                        start a server with the fetched models, 10 minutes
#   tools/soak.sh 30 --url http://HOST:PORT  load a running server (RSS from its /metrics)
#   options: --specd BIN  --models DIR  --concurrency N (8)  --seed S (1)  --api-key KEY  --samples FILE.csv  --only KIND
#            --serve-args "ARGS"  extra flags for the server started here
# The driver is tests/net/e2e/soak.mjs (Node + ws, installed by run.sh).
# Exit 0 when every check passes, 1 otherwise, 77 when node is missing.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage() { echo "usage: $0 DURATION_S [--url URL] [--specd BIN] [--models DIR] [--concurrency N] [--seed S] [--api-key KEY] [--serve-args ARGS]" >&2; exit 2; }
[ $# -ge 1 ] || usage
duration=$1; shift
[[ "$duration" =~ ^[0-9]+$ ]] && [ "$duration" -gt 0 ] || { echo "soak: DURATION_S must be a positive integer, got '$duration'" >&2; exit 2; }
url="" specd="$root/build/bin/specd" models="${SPECD_MODELS_DIR:-$root/models}" serve_args="" driver_args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --url) url=$2; shift 2 ;;
        --specd) specd=$2; shift 2 ;;
        --models) models=$2; shift 2 ;;
        --serve-args) serve_args=$2; shift 2 ;;
        --concurrency|--seed|--api-key|--samples|--only) driver_args+=("$1" "$2"); shift 2 ;;
        *) echo "soak: unknown option $1" >&2; usage ;;
    esac
done

pid=""
if [ -z "$url" ]; then
    [ -x "$specd" ] || { echo "soak: $specd not found; build first (tools/build.sh)" >&2; exit 1; }
    log=$(mktemp)
    # The environment's settings would change the server under test; the flags below are the whole configuration.
    env -u SPECD_API_KEY -u SPECD_CONFIG "$specd" serve -m "$models/stories15M-f32.gguf" --model-draft "$models/stories15M-q8_0.gguf" \
        --port 0 $serve_args >"$log" 2>&1 &
    pid=$!
    trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -f "$log"' EXIT
    for _ in $(seq 1 600); do
        url=$(grep -o 'http://127.0.0.1:[0-9]*' "$log" | head -n 1)
        [ -n "$url" ] && break
        kill -0 $pid 2>/dev/null || { echo "soak: specd serve exited:"; cat "$log"; exit 1; }
        sleep 0.1
    done
    [ -n "$url" ] || { echo "soak: no URL from specd serve"; cat "$log"; exit 1; }
    driver_args+=(--pid "$pid")
fi

"$root/tests/net/e2e/run.sh" soak.mjs "$url" "$duration" "${driver_args[@]}"
status=$?
[ $status -eq 77 ] && exit 77

if [ -n "$pid" ]; then
    kill -TERM $pid
    wait $pid
    code=$?
    pid=""
    if [ $code -eq 0 ]; then echo "ok   specd serve exited 0 after SIGTERM"; else echo "FAIL specd serve exited $code after SIGTERM"; status=1; fi
    failed_lines=$(grep -c "request failed" "$log" || true)
    echo "server log: $(wc -l <"$log") lines, $failed_lines 'request failed' (clear errors and client aborts included)"
fi
exit $status
