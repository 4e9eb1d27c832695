#!/usr/bin/env bash
# Installs the Debian packages specd builds and tests with (idempotent; only
# runs apt-get when something is missing). Needs root or sudo. chromium is for
# the chat page test, prometheus for promtool (the /metrics format check),
# python3-yaml for the deploy/ checks, python3-jinja2 to render real chat
# templates as the oracle of the tool-call formats, valgrind for the leak check,
# iproute2 for the multi-node network-namespace test. libpcre2-dev: the BPE
# pre-tokenizer's regexes.
#   tools/install-deps.sh          everything (build and test)
#   tools/install-deps.sh --build  only what building needs (deploy/Dockerfile)
set -euo pipefail
packages=(build-essential cmake ninja-build pkg-config catch2 libcli11-dev nlohmann-json3-dev
          libspdlog-dev libfmt-dev libcaf-dev libboost1.81-dev libpcre2-dev ca-certificates curl)
if [ "${1:-}" != "--build" ]; then
  packages+=(clang-14 libclang-rt-14-dev nodejs npm chromium prometheus python3 python3-yaml python3-jinja2 valgrind iproute2)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# nodejs from another source may already provide npm.
if command -v npm >/dev/null 2>&1; then
  missing=("${missing[@]/npm}")
fi
read -r -a missing <<<"${missing[*]:-}"
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install-deps: installing ${missing[*]}"
# Wait for another apt run (e.g. unattended upgrades on a fresh VM) rather than fail.
lock_wait=(-o DPkg::Lock::Timeout=600)
$sudo apt-get "${lock_wait[@]}" update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get "${lock_wait[@]}" install -y -q --no-install-recommends "${missing[@]}"
