#!/usr/bin/env bash
# ctest entry for the deploy/ consistency checks (check_deploy.py): needs a
# python3 with PyYAML (Debian's python3-yaml, from tools/install-deps.sh).
#   check_deploy.sh SPECD_BINARY MODELS_DIR
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
for py in /usr/bin/python3 python3; do
    if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import yaml' 2>/dev/null; then
        exec "$py" "$here/check_deploy.py" "$1" "$2" "$(cd "$here/../.." && pwd)"
    fi
done
echo "check_deploy: no python3 with the yaml module (apt-get install python3-yaml; tools/install-deps.sh does)" >&2
exit 1
