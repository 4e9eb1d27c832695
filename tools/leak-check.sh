#!/usr/bin/env bash
# Leak check of a short serve session under valgrind memcheck: start `specd
# serve` under valgrind, send completions (plain, streamed, chat, one
# abandoned mid-stream, a bad one), switch speculation through the admin
# endpoint, read /metrics, then SIGTERM; pass when the server exits 0 and
# valgrind reports no definite or indirect leak and no memory error.
#   tools/leak-check.sh [--specd BIN] [--models DIR]
# valgrind does not know AVX-512, so the kernels run as AVX2 (SPECD_ISA).
# tools/valgrind.supp hides the dynamic loader's reads while the CUDA
# libraries dlopen their dependencies (ld.so's, not specd's).
# Exit 0 pass, 1 fail, 77 when valgrind is not installed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
specd="$root/build/bin/specd" models="${SPECD_MODELS_DIR:-$root/models}"
while [ $# -gt 0 ]; do
    case "$1" in
        --specd) specd=$2; shift 2 ;;
        --models) models=$2; shift 2 ;;
        *) echo "usage: $0 [--specd BIN] [--models DIR]" >&2; exit 2 ;;
    esac
done
command -v valgrind >/dev/null 2>&1 || { echo "leak-check: valgrind not installed, skipping" >&2; exit 77; }
work=$(mktemp -d)
trap 'kill -9 $pid 2>/dev/null; rm -rf "$work"' EXIT
SPECD_ISA=avx2 valgrind --tool=memcheck --suppressions="$root/tools/valgrind.supp" --leak-check=full --show-leak-kinds=definite,indirect \
    --errors-for-leak-kinds=definite,indirect --error-exitcode=9 --log-file="$work/valgrind.log" \
    "$specd" serve -m "$models/stories15M-q8_0.gguf" --model-draft "$models/stories15M-q4_0.gguf" --port 0 \
    --threads 1 --threads-draft 1 --admin-key leak-check >"$work/serve.log" 2>&1 &
pid=$!
url=""
for _ in $(seq 1 1800); do
    url=$(grep -o 'http://127.0.0.1:[0-9]*' "$work/serve.log" | head -n 1)
    [ -n "$url" ] && break
    kill -0 $pid 2>/dev/null || { echo "leak-check: specd serve exited early:"; cat "$work/serve.log" "$work/valgrind.log"; exit 1; }
    sleep 0.1
done
[ -n "$url" ] || { echo "leak-check: no URL from specd serve"; exit 1; }
fail=0
step() {  # step NAME EXPECTED_STATUS curl-args...
    local name=$1 want=$2; shift 2
    local got
    got=$(curl -s -o "$work/body" -w '%{http_code}' --max-time 300 "$@")
    if [ "$got" = "$want" ]; then echo "ok   $name ($got)"; else echo "FAIL $name: HTTP $got, expected $want: $(head -c 200 "$work/body")"; fail=1; fi
}
json='Content-Type: application/json'
step "completion" 200 "$url/v1/completions" -H "$json" -d '{"prompt":"Once upon a time","max_tokens":12,"temperature":0}'
step "streamed completion" 200 -N "$url/v1/completions" -H "$json" -d '{"prompt":"Lily","max_tokens":8,"stream":true}'
step "chat" 200 "$url/v1/chat/completions" -H "$json" -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":8}'
step "bad request" 400 "$url/v1/completions" -H "$json" -d '{"prompt":"x","temperature":-1}'
step "speculation off" 200 "$url/admin/speculation" -H "Authorization: Bearer leak-check" -d '{"enabled":false}'
step "plain completion" 200 "$url/v1/completions" -H "$json" -d '{"prompt":"The sun","max_tokens":8}'
step "metrics" 200 "$url/metrics"
# Abandoned mid-stream: the server must cancel it and free its blocks.
curl -s -N --max-time 3 "$url/v1/completions" -H "$json" -d '{"prompt":"Once","max_tokens":200,"stream":true}' >/dev/null
sleep 2
kill -TERM $pid
wait $pid
code=$?
pid=""
echo "specd serve under valgrind exited $code"
grep -E "definitely lost|indirectly lost|possibly lost|no leaks are possible|ERROR SUMMARY" "$work/valgrind.log" | sed 's/^==[0-9]*== */valgrind: /'
if [ $code -ne 0 ]; then
    echo "FAIL: exit $code (9: valgrind found errors or leaks)"
    grep -A12 -E "definitely lost in|Invalid (read|write)|uninitialised" "$work/valgrind.log" | head -60
    fail=1
fi
[ $fail -eq 0 ] && echo "PASS: no leaks, no memory errors" || echo "FAIL"
exit $fail
