#!/usr/bin/env bash
# `specd bench-spec` measures what `generate` and `serve` run by default:
#   without --draft-vocab its draft rows use the 4096-id draft head (the
#   runtime's draft_vocab default), and --draft-vocab 0,4096 compares the
#   full head with it; every greedy row is token-identical to plain, so a
#   speculative row accepts drafts; a missing draft file is one error line
#   and exit 1.
# Usage: bench_spec_cli.sh SPECD_BINARY MODELS_DIR
set -uo pipefail
specd=$1
models=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; cat "$dir/err" 2>/dev/null; exit 1; }
common=(-m "$models/stories15M-f32.gguf" --drafts "$models/stories15M-q8_0.gguf" --no-ngram --draft-max 4
        --temps 0 --sets stories -n 12 -r 1 --out-svg '')

"$specd" bench-spec "${common[@]}" --out-json "$dir/default.json" >/dev/null 2>"$dir/err" || fail "default run exited $?"
python3 - "$dir/default.json" <<'PY' || fail "default rows"
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
drafts = sorted({r["proposer"] for r in rows if r["proposer"].startswith("draft:")})
assert drafts == ["draft:stories15M-q8_0 head 4096"], drafts
assert all(r["acceptance_rate"] > 0 for r in rows if r["proposer"].startswith("draft:")), rows
PY
echo "ok: default draft rows use the 4096-id head"

"$specd" bench-spec "${common[@]}" --draft-vocab 0,4096 --out-json "$dir/both.json" >/dev/null 2>"$dir/err" || fail "0,4096 run exited $?"
python3 - "$dir/both.json" <<'PY' || fail "0,4096 rows"
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
drafts = sorted({r["proposer"] for r in rows if r["proposer"].startswith("draft:")})
assert drafts == ["draft:stories15M-q8_0", "draft:stories15M-q8_0 head 4096"], drafts
PY
echo "ok: --draft-vocab 0,4096 compares the full head with the 4096-id head"

"$specd" bench-spec -m "$models/stories15M-f32.gguf" --drafts "$dir/missing.gguf" -n 4 -r 1 --out-json '' --out-svg '' \
    >/dev/null 2>"$dir/err"
rc=$?
[ "$rc" -eq 1 ] || fail "a missing draft exited $rc, expected 1"
[ "$(wc -l <"$dir/err")" -eq 1 ] || fail "a missing draft printed more than one line"
grep -q "missing.gguf" "$dir/err" || fail "the error does not name the missing file"
echo "ok: a missing draft file is one error line naming it, exit 1"
echo PASS
