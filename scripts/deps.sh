#!/usr/bin/env bash
# Installs the Debian packages eplb needs, only those that are missing.
# Idempotent; needs root or sudo when something is missing.
set -euo pipefail

PKGS=(
  build-essential pkg-config meson ninja-build python3   # build
  python3-numpy                 # Python binding tests and example (tools/python)
  python3-torch python3-venv    # the plugins against real vLLM and SGLang (scripts/real_stacks.sh):
                                # Debian's torch is CPU-only (PyPI's brings gigabytes of CUDA)
  libglpk-dev glpk-utils        # GLPK: linear programs and MIPs (lp/)
  libhwloc-dev hwloc            # hwloc: node topology (planner/)
  check                         # check: unit test framework (tests/)
  libzstd-dev                   # zstd: trace chunk compression (traces/)
  zlib1g-dev                    # zlib: CRC32 of trace chunks (traces/)
  libjansson-dev                # jansson: plan files, trace metadata, --json output
  libopenmpi-dev openmpi-bin    # OpenMPI: CPU communicator of the runtime (runtime/)
  libmicrohttpd-dev             # libmicrohttpd: eplbd metrics endpoint
  gnuplot-nox                   # gnuplot: simulator plots
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "eplb: installing ${missing[*]}" >&2
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# CUDA and NCCL are optional (meson features cuda/nccl = auto): they come with
# the NVIDIA toolkit image, not from Debian. Report what this build will use.
if [[ -x /usr/local/cuda/bin/nvcc ]] || command -v nvcc >/dev/null 2>&1; then
  echo "eplb: CUDA toolkit found: CUDA sources will be compiled" >&2
else
  echo "eplb: no CUDA toolkit: building without CUDA (the API reports EPLB_EUNSUPPORTED)" >&2
fi
