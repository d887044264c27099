#!/usr/bin/env bash
# Configures (once) and builds eplb in build/ (or $1), warnings as errors.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
export PATH="$PATH:/usr/local/cuda/bin"
if [[ ! -f $dir/build.ninja ]]; then
  meson setup "$dir" -Dwerror=true "$@" >&2
fi
ninja -C "$dir" >&2
