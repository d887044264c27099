#!/usr/bin/env bash
# Installs the real vLLM and SGLang packages (scripts/real_stacks.txt:
# pinned, hash-checked, --no-deps) into a venv at $1 (default
# build/real-stacks) for tools/python/tests/test_real_stacks.py. The venv
# sees Debian's python3-torch (CPU) and python3-numpy: PyPI's torch brings
# gigabytes of CUDA libraries. About 280 MB is downloaded (the vLLM wheel is
# most of it: compiled kernels a CPU never loads) and 800 MB installed, once:
# a venv installed from the same list is kept.
#
# Exit 0 when the venv is there: the caller may then require the test to run
# (scripts/test.sh sets EPLB_REAL_STACKS_REQUIRED=1). Exit 2 with one line on
# stderr when it cannot install (no torch, no venv module, offline): the
# test then skips.
set -uo pipefail
cd "$(dirname "$0")/.."
dest=${1:-build/real-stacks}
req=scripts/real_stacks.txt
py=/usr/bin/python3

skip() {
  echo "eplb: real vLLM/SGLang not installed ($1): tools/python/tests/test_real_stacks.py skips" >&2
  exit 2
}

[[ -x $py ]] || skip "no $py"
$py -c "import torch, numpy, venv, ensurepip" 2>/dev/null ||
  skip "$py lacks torch, numpy or venv (python3-torch python3-numpy python3-venv)"

stamp=$dest/installed.sha256
want=$(sha256sum "$req" | cut -d' ' -f1)
if [[ -f $stamp && $(cat "$stamp") == "$want" && -x $dest/venv/bin/python ]]; then
  exit 0
fi

rm -rf "$dest"
mkdir -p "$dest"
$py -m venv --system-site-packages "$dest/venv" >&2 || skip "python3 -m venv failed"
log=$dest/pip.log
# --no-deps: vLLM and SGLang declare torch==2.x with CUDA; Debian's torch
# stays. --only-binary: vLLM's sdist would compile CUDA kernels.
if ! PIP_NO_INPUT=1 "$dest/venv/bin/python" -m pip install --no-deps --only-binary :all: \
    --require-hashes --retries 2 --timeout 30 --disable-pip-version-check -q -r "$req" \
    >"$log" 2>&1; then
  rm -rf "$dest/venv"
  skip "pip failed, offline? $(grep -m1 '^ERROR' "$log" || tail -n1 "$log"); see $log"
fi
echo "$want" >"$stamp"
echo "eplb: real vLLM/SGLang installed in $dest/venv ($(du -sh "$dest/venv" | cut -f1))" >&2
