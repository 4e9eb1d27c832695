#!/usr/bin/env bash
# Starts `specd serve` on a free loopback port with the fetched models, runs
# one end-to-end client script against it (tests/net/e2e/run.sh), stops the
# server, and exits with the script's status (77 = skipped).
#   with_server.sh SPECD_BINARY MODELS_DIR SCRIPT.test.mjs ws|http [extra args]
# SPECD_SERVE_ARGS: extra flags for the server (e.g. "--api-key KEY").
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
specd=$1 models=$2 script=$3 scheme=$4
shift 4
log=$(mktemp)
"$specd" serve -m "$models/stories15M-f32.gguf" --model-draft "$models/stories15M-q8_0.gguf" --port 0 ${SPECD_SERVE_ARGS:-} >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
url=""
for _ in $(seq 1 300); do
    url=$(grep -o 'http://127.0.0.1:[0-9]*' "$log" | head -n 1)
    [ -n "$url" ] && break
    kill -0 $pid 2>/dev/null || { echo "with_server: specd serve exited:"; cat "$log"; exit 1; }
    sleep 0.1
done
[ -n "$url" ] || { echo "with_server: no URL from specd serve"; cat "$log"; exit 1; }
[ "$scheme" = ws ] && url="ws://${url#http://}"
"$here/run.sh" "$script" "$url" "$@"
status=$?
# The server must still be alive and healthy after the client's abuse.
if [ $status -eq 0 ] && ! curl -sf "${url/ws:/http:}/health" >/dev/null; then
    echo "with_server: the server no longer answers /health after $script"
    status=1
fi
exit $status
