#!/usr/bin/env bash
# The main job: install what is needed, build, fetch the default model and
# start the server with speculative decoding (stories15M f32 target, its q8_0
# copy as the draft). It prints its URL; Ctrl-C drains and stops it.
# Extra arguments go to `specd serve` (e.g. --port 9000 --api-key KEY).
# SPECD_MODEL / SPECD_DRAFT serve other GGUF files (README, "Models you bring");
# SPECD_DRAFT=none serves the target alone.
set -euo pipefail
root=$(cd "$(dirname "$0")" && pwd)
"$root/tools/install-deps.sh"
"$root/tools/build.sh"
"$root/tools/fetch-model.sh"
models=${SPECD_MODELS_DIR:-$root/models}
target=${SPECD_MODEL:-$models/stories15M-f32.gguf}
draft=${SPECD_DRAFT:-$models/stories15M-q8_0.gguf}
draft_args=(--model-draft "$draft")
[ "$draft" = none ] && draft_args=()
exec "$root/build/bin/specd" serve -m "$target" "${draft_args[@]}" \
    --host "${SPECD_HOST:-127.0.0.1}" --port "${SPECD_PORT:-8080}" "$@"
