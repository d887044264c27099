#!/usr/bin/env bash
# tests/gpu/run.sh — the GPU check: builds eplb in its own build directory
# and runs tests/gpu/gpu_check on one GPU (kernels vs CPU references on
# random and ESFT inputs, the NCCL runtime on one rank, the device runtime
# vs the emulated device over 100 ESFT steps with the reference MoE layer,
# per-layer timings). Without a GPU it builds, runs the CPU checks and
# skips the GPU part (exit 0). Prints one
# summary table; exits non-zero on any mismatch, failed step or time-out.
# Budget: under five minutes in all (each step has its own timeout, cut to
# what is left of EPLB_GPU_CHECK_TOTAL_S, default 290 s).
#   usage: tests/gpu/run.sh [BUILD_DIR]   (default: build-gpu)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-"$root/build-gpu"}
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
export EPLB_NCCL_TIMEOUT_MS=${EPLB_NCCL_TIMEOUT_MS:-30000}
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export CK_FORK=no   # no fork after CUDA init

# The whole run stays under five minutes: a step gets its own limit or
# what is left of TOTAL, whichever is less.
TOTAL=${EPLB_GPU_CHECK_TOTAL_S:-290}
left() { # left LIMIT: min(LIMIT, TOTAL - elapsed), at least 1
  local l=$((TOTAL - SECONDS))
  [ "$l" -lt "$1" ] || l=$1
  [ "$l" -ge 1 ] || l=1
  echo "$l"
}

step() { # step NAME SECONDS COMMAND...
  local name=$1 limit
  limit=$(left "$2")
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
step "build" 150 ninja -C "$build" -j"$(nproc)" tests/kernels/gpu_check tests/kernels/test_kernels \
  tests/runtime/test_device
step "CPU references (kernels suite)" 30 "$build/tests/kernels/test_kernels"
step "device runtime on the emulated device" 60 "$build/tests/runtime/test_device"
# gpu_check exits 2 when there is no device: everything above built and
# passed, so the GPU part is skipped (exit 0) rather than failed.
limit=$(left 150)
echo "== GPU check (limit ${limit}s)" >&2
rc=0
timeout --kill-after=10 "$limit" "$build/tests/kernels/gpu_check" "$root/traces/samples" || rc=$?
case $rc in
  0) echo "== GPU check: done" >&2 ;;
  2) echo "run.sh: SKIP: no CUDA device (the build and the CPU checks passed)" >&2 ;;
  124 | 137) echo "run.sh: GPU check: timed out after ${limit}s" >&2; exit 1 ;;
  *) echo "run.sh: GPU check: failed (exit $rc)" >&2; exit 1 ;;
esac
