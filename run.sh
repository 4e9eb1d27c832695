#!/usr/bin/env bash
# The main job: install what is needed, build, fetch the default model and
# generate from it. (Becomes the speculative-decoding server once it exists.)
set -euo pipefail
root=$(cd "$(dirname "$0")" && pwd)
"$root/tools/install-deps.sh"
"$root/tools/build.sh"
"$root/tools/fetch-model.sh"
models=${SPECD_MODELS_DIR:-$root/models}
exec "$root/build/bin/specd" generate -m "$models/stories15M-f32.gguf" -p "${1:-Once upon a time}" -n 200 --temp 0 "${@:2}"
