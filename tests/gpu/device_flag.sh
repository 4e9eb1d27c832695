#!/usr/bin/env bash
# `specd generate` and `specd bench` honour --device like `specd serve`:
#   --device cpu   runs (on the CPU, no GPU line);
#   --device cuda  without a usable device exits 1 with exactly one stderr
#                  line "specd: error: --device cuda: no CUDA device (<why>)";
#                  with a device it runs (then the first stderr line says so);
#   --device bogus is rejected by the parser (non-zero exit, names the flag).
# Usage: device_flag.sh SPECD_BINARY MODELS_DIR
set -uo pipefail
specd=$1
model=$2/stories15M-f32.gguf
err=$(mktemp)
trap 'rm -f "$err"' EXIT
fail() { echo "FAIL: $*"; cat "$err"; exit 1; }

for cmd in "generate -p Once -n 4 --temp 0" "bench -p 8 -n 4 -r 1 -t 1"; do
    name=${cmd%% *}
    # shellcheck disable=SC2086
    "$specd" $cmd -m "$model" --device cpu >/dev/null 2>"$err" || fail "$name --device cpu exited $?"
    grep -q "CUDA" "$err" && fail "$name --device cpu mentioned CUDA"
    echo "ok: $name --device cpu"

    # shellcheck disable=SC2086
    "$specd" $cmd -m "$model" --device cuda >/dev/null 2>"$err"
    rc=$?
    if [ "$rc" -eq 0 ]; then
        grep -q "^specd: running on CUDA device" "$err" || fail "$name --device cuda ran without saying where"
        echo "ok: $name --device cuda ran on a GPU"
    else
        [ "$rc" -eq 1 ] || fail "$name --device cuda exited $rc, expected 1"
        [ "$(wc -l <"$err")" -eq 1 ] || fail "$name --device cuda printed $(wc -l <"$err") lines, expected 1"
        grep -q "^specd: error: --device cuda: no CUDA device (.\+)$" "$err" || fail "$name --device cuda: unexpected message"
        echo "ok: $name --device cuda: $(cat "$err")"
    fi

    # shellcheck disable=SC2086
    "$specd" $cmd -m "$model" --device bogus >/dev/null 2>"$err" && fail "$name --device bogus was accepted"
    grep -q -- "--device" "$err" || fail "$name --device bogus: the message does not name --device"
    echo "ok: $name --device bogus rejected: $(head -1 "$err")"
done

# auto never refuses: on the CPU it says why in one line.
"$specd" generate -m "$model" -p Once -n 2 --temp 0 --device auto >/dev/null 2>"$err" || fail "generate --device auto exited $?"
if ! grep -q "^specd: running on CUDA device" "$err"; then
    grep -q "^specd: no CUDA device (.\+): running on the CPU$" "$err" || fail "generate --device auto: no fallback line"
fi
echo "ok: generate --device auto: $(head -1 "$err")"
echo "PASS"
