#!/usr/bin/env bash
# Runs one end-to-end client script against a running `specd serve`.
#
#   tests/net/e2e/run.sh ws_client.test.mjs     ws://127.0.0.1:8080
#   tests/net/e2e/run.sh openai_client.test.mjs http://127.0.0.1:8080
#   tests/net/e2e/run.sh chat_page.test.mjs     http://127.0.0.1:8080 chat_page.png
#
# The npm packages named by package.json next to this script are installed
# once into a cache outside the source tree (tests/support/node_run.sh).
# Exit codes: the script's own; 77 (ctest: skipped) when node or npm is missing.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ $# -lt 1 ]]; then
    echo "usage: $0 SCRIPT.test.mjs URL [args...]" >&2
    exit 2
fi
exec "$here/../../support/node_run.sh" "$here" "$@"
