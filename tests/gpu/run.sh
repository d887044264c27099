#!/usr/bin/env bash
# tests/gpu/run.sh — the GPU check: builds eplb in its own build directory
# and runs tests/gpu/gpu_check on one GPU (kernels vs CPU references on
# random and ESFT inputs, the NCCL runtime on one rank, timings). Prints one
# summary table; exits non-zero on any mismatch or failed step. Budget: under
# five minutes (each step has its own timeout).
#   usage: tests/gpu/run.sh [BUILD_DIR]   (default: build-gpu)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-"$root/build-gpu"}
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
export EPLB_NCCL_TIMEOUT_MS=${EPLB_NCCL_TIMEOUT_MS:-30000}
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export CK_FORK=no   # no fork after CUDA init

step() { # step NAME SECONDS COMMAND...
  local name=$1 limit=$2
  shift 2
  echo "== $name (limit ${limit}s)" >&2
  local t0=$SECONDS rc=0
  timeout --kill-after=10 "$limit" "$@" || rc=$?
  if [ "$rc" -ne 0 ]; then
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
      echo "run.sh: $name: timed out after ${limit}s" >&2
    else
      echo "run.sh: $name: failed (exit $rc)" >&2
    fi
    exit 1
  fi
  echo "== $name: done in $((SECONDS - t0))s" >&2
}

command -v nvidia-smi >/dev/null && nvidia-smi -L >&2 || echo "run.sh: nvidia-smi not found" >&2
if [ ! -f "$build/build.ninja" ]; then
  step "meson setup" 60 meson setup "$build" "$root" -Dcuda=enabled -Dnccl=enabled \
    -Dbuildtype=release -Dwerror=true
fi
step "build" 150 ninja -C "$build" -j"$(nproc)" tests/kernels/gpu_check tests/kernels/test_kernels
step "CPU references (kernels suite)" 30 "$build/tests/kernels/test_kernels"
step "GPU check" 120 "$build/tests/kernels/gpu_check" "$root/traces/samples"
