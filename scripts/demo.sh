#!/usr/bin/env bash
# The main job on bundled data: the real ESFT routing trace (DeepSeek-V2-Lite
# architecture, 26 MoE layers x 64 experts, top-6) on a 2-node x 4-GPU
# cluster with 10 expert slots per GPU. eplb converts the trace, plans with
# each policy, replays the trace against every plan in the simulator and
# prints the comparison; plots go to out/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build
eplb=build/tools/eplb/eplb
mkdir -p out
policies=deepseek,balanced
if $eplb plan --help 2>/dev/null | grep -q locality; then policies=$policies,locality; fi

echo "== trace: traces/samples/esft-dsv2lite/topk_ids.npy -> out/esft.eplbt (256 tokens per step)"
$eplb trace convert --from topk-npy --experts 64 --tokens-per-step 256 \
  --model DeepSeek-V2-Lite-ESFT --phase prefill \
  traces/samples/esft-dsv2lite/topk_ids.npy out/esft.eplbt
$eplb trace info out/esft.eplbt
$eplb trace stats out/esft.eplbt --ep 8 | tail -n 1 | sed 's/^/   unbalanced (contiguous EP8) busiest\/mean, mean over layers: /'

echo
echo "== plans for 2 nodes x 4 GPUs, 80 slots (on the whole trace)"
for p in ${policies//,/ }; do
  extra=()
  [[ $p == locality ]] && extra=(--cluster 2x4)
  $eplb plan --loads out/esft.eplbt --gpus 8 --nodes 2 --replicas 80 --policy "$p" "${extra[@]}" \
    -o "out/plan-$p.json"
done

echo
echo "== simulated replay, one static plan per policy (step by step: balance, traffic, time)"
$eplb sim --compare "$policies,balanced:robust" --trace out/esft.eplbt --cluster 2x4 \
  --slots-per-gpu 10 --plot out/compare-static.png
echo "(balanced:robust: the same placement with static shares that hedge over the window's"
echo " steps, for serving stacks that cannot re-split per batch)"
echo
echo "== the same plans with an exact re-split of every batch (LPLB-style, microseconds)"
$eplb sim --compare "$policies" --trace out/esft.eplbt --cluster 2x4 --slots-per-gpu 10 \
  --split-per-batch --plot out/compare-split.png
echo
echo "== online: the first balanced plan, then a few slots moved every step towards the last"
echo "   step's counts (continuous re-placement, what the runtime does with several ranks)"
$eplb sim --policy balanced --trace out/esft.eplbt --cluster 2x4 --slots-per-gpu 10 \
  --plan-steps 0:65 --split-per-batch --continuous 1
echo
echo "plots: out/compare-static.png out/compare-split.png; plans: out/plan-*.json"
