#!/usr/bin/env bash
# TAP test of `eplb sim`: exit codes, messages and outputs.
# usage: cli_sim.sh EPLB
set -u
EPLB=$1
. "$(dirname "$0")/../tap.sh"
check() { if eval "$2"; then ok "$1"; else notok "$1"; sed 's/^/# /' "$T/err"; fi; }
one_line() { [[ $(wc -l <"$T/err") -eq 1 ]] && grep -q -- "$1" "$T/err"; }

"$EPLB" trace gen --layers 2 --experts 8 --topk 2 --steps 12 --tokens-per-step 64 --ranks 8 \
  --seed 3 -o "$T/t.eplbt" >/dev/null 2>&1 || { echo "Bail out! trace gen failed"; exit 1; }
p2l='[0, 1, 2, 3, 4, 5, 6, 7]'
echo "{\"num_layers\": 2, \"num_logical_experts\": 8, \"num_gpus\": 8, \"num_nodes\": 2,
 \"slots_per_gpu\": 1, \"layers\": [{\"phy2log\": $p2l}, {\"phy2log\": $p2l}]}" >"$T/plan8.json"
echo "{\"num_layers\": 1, \"num_logical_experts\": 8, \"num_gpus\": 8,
 \"slots_per_gpu\": 1, \"layers\": [{\"phy2log\": $p2l}]}" >"$T/plan1l.json"
echo '{"expert_time_us": [[64, 20]], "dispatch_bytes": 7392}' >"$T/badcost.json"

expect 0 "--help" "$EPLB" sim --help
check "--help states the round-robin source rule" "grep -q 'i mod G' '$T/out'"
expect 2 "no arguments" "$EPLB" sim
expect 2 "unknown policy" "$EPLB" sim --trace "$T/t.eplbt" --cluster 2x4 --policy nosuchpolicy \
  --slots-per-gpu 2
check "unknown policy: one line naming it" "one_line nosuchpolicy"
expect 2 "--compare with an unknown policy" "$EPLB" sim --compare balanced,nosuchpolicy \
  --trace "$T/t.eplbt" --cluster 2x4 --slots-per-gpu 2
expect 2 "--compare needs --slots-per-gpu" "$EPLB" sim --compare balanced \
  --trace "$T/t.eplbt" --cluster 2x4
expect 2 "--plan and --policy together" "$EPLB" sim --trace "$T/t.eplbt" --cluster 2x4 \
  --plan "$T/plan8.json" --policy balanced

expect 2 "plan for 8 GPUs on a 3x4 cluster" "$EPLB" sim --trace "$T/t.eplbt" --cluster 3x4 \
  --plan "$T/plan8.json" --csv "$T/no.csv"
check "GPU mismatch: one line naming both counts" "one_line '8 GPUs' && grep -q 12 '$T/err'"
check "no partial CSV on error" "[[ ! -e '$T/no.csv' ]] && ! ls '$T'/no.csv.tmp* >/dev/null 2>&1"
expect 2 "plan/trace layer mismatch" "$EPLB" sim --trace "$T/t.eplbt" --cluster 2x4 \
  --plan "$T/plan1l.json"
check "shape mismatch: one line" "one_line layers"
expect 2 "bad cost file" "$EPLB" sim --trace "$T/t.eplbt" --cluster 2x4 --plan "$T/plan8.json" \
  --cost "$T/badcost.json"
check "bad cost file: one line naming file and key" "one_line badcost.json && grep -q dispatch_bytes '$T/err'"
expect 2 "bad cluster" "$EPLB" sim --trace "$T/t.eplbt" --cluster 2y4 --plan "$T/plan8.json"
expect 2 "empty step range" "$EPLB" sim --trace "$T/t.eplbt" --cluster 2x4 \
  --plan "$T/plan8.json" --steps 50:60

expect 0 "fixed plan" "$EPLB" sim --trace "$T/t.eplbt" --cluster 2x4 --plan "$T/plan8.json" \
  --csv "$T/steps.csv"
check "summary printed" "grep -q 'mean balancedness' '$T/out'"
check "CSV: header + 12 steps, 8 GPU columns" \
  "[[ \$(wc -l <'$T/steps.csv') -eq 13 ]] && head -1 '$T/steps.csv' | grep -q ',gpu7\$'"

expect 0 "--compare" "$EPLB" sim --compare deepseek,balanced --trace "$T/t.eplbt" \
  --cluster 2x4 --slots-per-gpu 2 --json
check "--compare --json: two policies with the table fields" "python3 -c \"
import json; d = json.load(open('$T/out'))
ps = d['policies']; assert [p['policy'] for p in ps] == ['deepseek', 'balanced']
for p in ps:
    for k in ('mean_balancedness', 'p5_balancedness', 'cross_node_copies', 'cross_node_bytes',
              'est_step_time_us', 'migrated_bytes'):
        assert k in p, k
    assert 0 < p['mean_balancedness'] <= 1 and p['cross_node_copies'] > 0
\""
expect 0 "--compare table" "$EPLB" sim --compare deepseek,balanced --trace "$T/t.eplbt" \
  --cluster 2x4 --slots-per-gpu 2 --rebalance-every 4 --window 2
check "table: header and one row per policy" \
  "[[ \$(wc -l <'$T/out') -eq 3 ]] && head -1 '$T/out' | grep -q p5_balancedness"
expect 0 "--split-per-batch" "$EPLB" sim --trace "$T/t.eplbt" --cluster 2x4 --policy deepseek \
  --slots-per-gpu 2 --split-per-batch
check "split gain reported" "grep -q 'split gain' '$T/out'"

expect 1 "--plot without gnuplot" env PATH=/nonexistent "$EPLB" sim --compare balanced \
  --trace "$T/t.eplbt" --cluster 2x4 --slots-per-gpu 2 --plot "$T/nogp.png"
check "no gnuplot: clear message, table still printed, no file" \
  "one_line gnuplot && grep -q '^balanced' '$T/out' && [[ ! -e '$T/nogp.png' ]]"
# Rebalancing with the incremental policy plans from the plan in force: it moves
# fewer expert weights than full balanced replans on a drifting trace.
"$EPLB" trace gen --layers 4 --experts 32 --topk 4 --steps 48 --tokens-per-step 512 --ranks 8 \
  --drift 0.8 --seed 11 -o "$T/drift.eplbt" >/dev/null 2>&1
expect 0 "--compare balanced,incremental with rebalancing" "$EPLB" sim --compare balanced,incremental \
  --trace "$T/drift.eplbt" --cluster 2x4 --slots-per-gpu 6 --rebalance-every 8 --json
check "incremental migrates less than balanced and both rebalanced" \
  "python3 -c \"import json; p = {x['policy']: x for x in json.load(open('$T/out'))['policies']}; b, i = p['balanced'], p['incremental']; exit(0 if 0 < i['migrated_bytes'] < b['migrated_bytes'] else 1)\""

if command -v gnuplot >/dev/null 2>&1; then
  expect 0 "--plot" "$EPLB" sim --compare deepseek,balanced --trace "$T/t.eplbt" \
    --cluster 2x4 --slots-per-gpu 2 --plot "$T/p.png"
  check "plot is a PNG" "head -c 4 '$T/p.png' | grep -q PNG"
else
  skip "gnuplot not installed"
fi
tap_done
