#!/usr/bin/env bash
# The main job on bundled data: the real ESFT routing trace (DeepSeek-V2-Lite
# architecture, 26 MoE layers x 64 experts, top-6) becomes a native trace, and
# eplb prints its statistics. Output files go to out/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build
eplb=build/tools/eplb/eplb
mkdir -p out
echo "== convert traces/samples/esft-dsv2lite/topk_ids.npy -> out/esft.eplbt (256 tokens per step)"
$eplb trace convert --from topk-npy --experts 64 --tokens-per-step 256 \
  --model DeepSeek-V2-Lite-ESFT --phase prefill \
  traces/samples/esft-dsv2lite/topk_ids.npy out/esft.eplbt
echo "== eplb trace info out/esft.eplbt"
$eplb trace info out/esft.eplbt
echo "== eplb trace stats out/esft.eplbt --ep 8,16,32"
$eplb trace stats out/esft.eplbt --ep 8,16,32
