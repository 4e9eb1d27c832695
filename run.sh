#!/usr/bin/env bash
# The main job: install what is needed, build, fetch the default model and
# start the server with speculative decoding (stories15M f32 target, its q8_0
# copy as the draft). It prints its URL; Ctrl-C drains and stops it.
# Extra arguments go to `specd serve` (e.g. --port 9000 --api-key KEY).
set -euo pipefail
root=$(cd "$(dirname "$0")" && pwd)
"$root/tools/install-deps.sh"
"$root/tools/build.sh"
"$root/tools/fetch-model.sh"
models=${SPECD_MODELS_DIR:-$root/models}
exec "$root/build/bin/specd" serve -m "$models/stories15M-f32.gguf" --model-draft "$models/stories15M-q8_0.gguf" \
    --host "${SPECD_HOST:-127.0.0.1}" --port "${SPECD_PORT:-8080}" "$@"
