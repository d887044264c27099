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
check "table: the step ranges, a header, one row per policy and the bound" \
  "[[ \$(wc -l <'$T/out') -eq 6 ]] && sed -n 2p '$T/out' | grep -q p5_balancedness &&
   sed -n 5p '$T/out' | grep -q '^step time bound ' &&
   sed -n 6p '$T/out' | grep -q '^per-step oracle .*ceiling' &&
   head -1 '$T/out' | grep -q 'first plan on steps 0-1, replanned every 4 steps from the previous 2; scored on steps 0-11'"
expect 0 "--compare holds out by default" "$EPLB" sim --compare deepseek,balanced \
  --trace "$T/t.eplbt" --cluster 2x4 --slots-per-gpu 2
check "default: planned on the first half, scored on the second" \
  "head -1 '$T/out' | grep -q '^planned on steps 0-5, scored on steps 6-11; local-first routing'"
expect 0 "--policy without --plan-steps: the oracle plan" "$EPLB" sim --trace "$T/t.eplbt" \
  --cluster 2x4 --policy balanced --slots-per-gpu 2
check "oracle: says the plan has seen the scored steps" \
  "grep -q 'planned on steps 0-11, scored on steps 0-11 (the plan has seen them)' '$T/out'"
expect 0 "--policy --plan-steps" "$EPLB" sim --trace "$T/t.eplbt" --cluster 2x4 --policy balanced \
  --slots-per-gpu 2 --plan-steps 8:12 --csv "$T/held.csv"
check "--plan-steps: text names the steps, 8 steps scored" \
  "grep -q 'planned on steps 8-11, scored on steps 0-7' '$T/out' && grep -q '^steps  *8 ' '$T/out'"
check "--plan-steps: the CSV has the scored steps only" \
  "[[ \$(cut -d, -f1 '$T/held.csv' | tail -n +2 | tr '\n' ' ') == '0 1 2 3 4 5 6 7 ' ]]"
expect 0 "--plan-steps A: (to the end) with --steps" "$EPLB" sim --trace "$T/t.eplbt" \
  --cluster 2x4 --policy balanced --slots-per-gpu 2 --plan-steps 2: --steps 0:9
check "plan to the end, scored before" "grep -q 'planned on steps 2-11, scored on steps 0-1' '$T/out'"
bad_plan_steps() { # DESC NEEDLE ARGS...
  local desc=$1 needle=$2
  shift 2
  expect 2 "$desc" "$EPLB" sim --trace "$T/t.eplbt" --cluster 2x4 --slots-per-gpu 2 "$@"
  one_line_naming "$needle" "$desc: one line naming the problem"
}
bad_plan_steps "--plan-steps A >= B" "empty range" --policy balanced --plan-steps 7:3
bad_plan_steps "--plan-steps not numbers" "integer" --policy balanced --plan-steps a:3
bad_plan_steps "--plan-steps without a colon" "A:B" --compare balanced --plan-steps 5
bad_plan_steps "--plan-steps past the trace" "12 steps" --compare balanced --plan-steps 0:13
bad_plan_steps "--plan-steps leaving nothing to score" "none of the replayed" --compare balanced \
  --plan-steps 0:12
bad_plan_steps "--plan-steps covering --steps" "none of the replayed" --policy balanced \
  --plan-steps 2:6 --steps 3:5
bad_plan_steps "--plan-steps inside the replayed range" "in two" --compare balanced \
  --plan-steps 4:8
bad_plan_steps "--plan-steps after the scored steps with --rebalance-every" "rebalancing" \
  --compare balanced --plan-steps 8:12 --rebalance-every 2
expect 2 "--plan-steps with --plan" "$EPLB" sim --trace "$T/t.eplbt" --cluster 2x4 \
  --plan "$T/plan8.json" --plan-steps 0:4
one_line_naming "--plan-steps" "--plan-steps with --plan: one line"
"$EPLB" trace gen --layers 2 --experts 8 --topk 2 --steps 1 --tokens-per-step 64 --ranks 8 \
  --seed 3 -o "$T/one.eplbt" >/dev/null 2>&1
expect 2 "--compare on one step cannot hold out" "$EPLB" sim --compare balanced \
  --trace "$T/one.eplbt" --cluster 2x4 --slots-per-gpu 2
one_line_naming "holding out" "one step: one line"

# The bundled ESFT trace: local-first routing (the runtime's rule, default)
# keeps tokens on their node where the expert has a replica there, so a
# balanced plan sends fewer copies across nodes than with global shares, and
# moves no token in or out of existence. Held out: planned on steps 0-64.
"$EPLB" trace convert --from topk-npy --experts 64 --tokens-per-step 256 \
  "${EPLB_SAMPLES:?}/esft-dsv2lite/topk_ids.npy" "$T/esft.eplbt" >/dev/null 2>&1 ||
  { echo "Bail out! ESFT conversion failed"; exit 1; }
for lf in local global; do
  flag=()
  [[ $lf == global ]] && flag=(--no-local-first)
  expect 0 "ESFT balanced, $lf routing" "$EPLB" sim --compare balanced --trace "$T/esft.eplbt" \
    --cluster 2x4 --slots-per-gpu 10 --plan-steps 0:65 --json --csv "$T/esft-$lf.csv" "${flag[@]}"
  cp "$T/out" "$T/esft-$lf.json"
done
check "ESFT: JSON names the planned and scored steps and the routing" "python3 -c \"
import json
for lf, want in (('local', True), ('global', False)):
    d = json.load(open('$T/esft-' + lf + '.json'))
    assert d['plan_steps'] == [0, 65] and d['scored_steps'] == [65, 130], d
    assert d['local_first'] is want and d['policies'][0]['steps'] == 65
\""
check "ESFT: local-first sends fewer cross-node copies (by over 5%)" "python3 -c \"
import json
c = {lf: json.load(open('$T/esft-' + lf + '.json'))['policies'][0]['cross_node_copies']
     for lf in ('local', 'global')}
assert 0 < c['local'] < 0.95 * c['global'], c
\""
check "ESFT: every step's GPU tokens sum to tokens x top-k x layers either way" "python3 -c \"
import csv
rows = {lf: list(csv.DictReader(open('$T/esft-' + lf + '.csv'))) for lf in ('local', 'global')}
assert len(rows['local']) == len(rows['global']) == 65
for a, b in zip(rows['local'], rows['global']):
    assert a['step'] == b['step']
    ta = sum(float(a['gpu%d' % g]) for g in range(8))
    tb = sum(float(b['gpu%d' % g]) for g in range(8))
    want = int(a['num_tokens']) * 6 * 26
    assert abs(ta - want) < 0.05 and abs(tb - want) < 0.05, (a['step'], ta, tb, want)
\""
expect 0 "ESFT --compare held out by default" "$EPLB" sim --compare deepseek,locality \
  --trace "$T/esft.eplbt" --cluster 2x4 --slots-per-gpu 10 --json
check "ESFT default: planned on 0-64, scored on 65-129" "python3 -c \"
import json; d = json.load(open('$T/out'))
assert d['plan_steps'] == [0, 65] and d['scored_steps'] == [65, 130], d
assert [p['steps'] for p in d['policies']] == [65, 65]
\""

# Continuous re-placement, the runtime's (#32): planned on 0-64, moves through
# every step, scored on 65-129: above the same first plan re-split per batch,
# moves counted as migrated bytes; staged copies (the old expert serves while
# the new one is copied) beat in-place ones; bad combinations are refused.
for mode in "" "--continuous 1" "--continuous 1 --continuous-copy-steps 1" \
  "--continuous 1 --continuous-copy-steps 1 --continuous-in-place"; do
  # shellcheck disable=SC2086
  expect 0 "ESFT ${mode:-kept plan}" "$EPLB" sim --policy balanced --trace "$T/esft.eplbt" \
    --cluster 2x4 --slots-per-gpu 10 --plan-steps 0:65 --split-per-batch --json $mode
  cp "$T/out" "$T/cont-${#mode}.json"
done
check "ESFT continuous: above the kept plan, staged above in place, bytes counted" "python3 -c \"
import json
k, c, s, i = (json.load(open('$T/cont-%d.json' % n)) for n in (0, 14, 40, 62))
b = [d['policies'][0]['mean_balancedness'] for d in (k, c, s, i)]
m = [d['policies'][0]['migrated_bytes'] for d in (k, c, s, i)]
assert b[1] > b[0] + 0.1 and b[1] > b[2] > b[3] > b[0], b
assert m[0] == 0 and min(m[1:]) > 0, m
assert c['scored_steps'] == [65, 130], c
\""
# Plans that generalise (#32): re-split per batch, balanced planned on either
# half (loads chosen by holding out parts of the window) is not below
# DeepSeek's EPLB on the other half (it was, planned on the raw window).
for ps in 0:65 65:130; do
  expect 0 "ESFT held out $ps" "$EPLB" sim --compare deepseek,balanced --trace "$T/esft.eplbt" \
    --cluster 2x4 --slots-per-gpu 10 --plan-steps $ps --split-per-batch --no-oracle --json
  check "ESFT planned on $ps: balanced >= deepseek re-split per batch" "python3 -c \"
import json; p = {x['policy']: x['mean_balancedness'] for x in json.load(open('$T/out'))['policies']}
assert p['balanced'] >= p['deepseek'], p
\""
done
# Served by static shares, balanced also places for the window's steps
# (planner/scenario.c): held out, it is above DeepSeek's EPLB at 2x4 / 80 and
# 2x8 / 80 slots planned on either half (it was below planned on 0:65).
for shape in "2x4 10" "2x8 5"; do
  for ps in 0:65 65:130; do
    # shellcheck disable=SC2086
    set -- $shape
    expect 0 "ESFT static $1/$2 held out $ps" "$EPLB" sim --compare deepseek,balanced \
      --trace "$T/esft.eplbt" --cluster "$1" --slots-per-gpu "$2" --plan-steps $ps --no-oracle --json
    check "ESFT static $1/$2 planned on $ps: balanced > deepseek" "python3 -c \"
import json; p = {x['policy']: x['mean_balancedness'] for x in json.load(open('$T/out'))['policies']}
assert p['balanced'] > p['deepseek'], p
\""
  done
done
# The output names the cost model it priced: a trace without a model (this
# ESFT conversion has none) is priced with the default table, and says so.
check "the JSON names the cost model (the default table, no model)" "python3 -c \"
import json; d = json.load(open('$T/cont-0.json'))
assert 'default table' in d['cost_model'] and 'names no model' in d['cost_model'], d['cost_model']
\""
expect 0 "a model given" "$EPLB" sim --policy balanced --trace "$T/esft.eplbt" --cluster 2x4 \
  --slots-per-gpu 10 --model deepseek-v2-lite --gpu h100
check "the text names the model and GPU it priced" "grep -q '^cost model  *deepseek-v2-lite on h100' '$T/out'"
for bad in "--continuous 1" "--continuous 1 --split-per-batch --rebalance-every 4" \
  "--continuous 1 --split-per-batch --continuous-lag 2" \
  "--continuous 1 --split-per-batch --move-weight -1"; do
  # shellcheck disable=SC2086
  expect 2 "sim $bad" "$EPLB" sim --policy balanced --trace "$T/t.eplbt" --cluster 2x4 \
    --slots-per-gpu 2 $bad
  one_line_naming "continuous\|move_weight\|rebalance" "sim $bad: one line"
done

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

# Which layers switch is the runtime's rule (eplb_plan_switch_select): a threshold no gain
# reaches moves nothing, -1 moves every layer that differs, the default lies between.
for g in 2 -1; do
  expect 0 "rebalancing with --gain-threshold $g" "$EPLB" sim --compare balanced \
    --trace "$T/drift.eplbt" --cluster 2x4 --slots-per-gpu 6 --rebalance-every 8 \
    --gain-threshold "$g" --json
  cp "$T/out" "$T/gain$g.json"
done
check "--gain-threshold: 2 migrates nothing, -1 migrates" \
  "python3 -c \"import json; m = lambda f: json.load(open(f))['policies'][0]['migrated_bytes']; a, b = m('$T/gain2.json'), m('$T/gain-1.json'); exit(0 if a == 0 and b > 0 else 1)\""
expect 0 "--move-budget 1 with rebalancing" "$EPLB" sim --compare balanced \
  --trace "$T/drift.eplbt" --cluster 2x4 --slots-per-gpu 6 --rebalance-every 8 --move-budget 1 \
  --json
check "--move-budget 1: at most one slot per replan (5 replans)" \
  "python3 -c \"import json; x = json.load(open('$T/out'))['policies'][0]; exit(0 if x['migrated_bytes'] <= 5 * 44040192 else 1)\""
expect 2 "--gain-threshold nan" "$EPLB" sim --compare balanced --trace "$T/drift.eplbt" \
  --cluster 2x4 --slots-per-gpu 6 --gain-threshold nan
expect 2 "--split-tolerance 2" "$EPLB" sim --compare balanced --trace "$T/drift.eplbt" \
  --cluster 2x4 --slots-per-gpu 6 --split-per-batch --split-tolerance 2

# The deployment: --model/--gpu, the trace's model, the decode policy (issue #20).
"$EPLB" trace gen --layers 2 --experts 16 --topk 4 --steps 12 --tokens-per-step 64 --ranks 8 \
  --seed 5 --model deepseek-ai/DeepSeek-V2-Lite -o "$T/v2.eplbt" >/dev/null 2>&1
echo '{"hidden_size": 2048, "moe_intermediate_size": 1408, "num_experts": 16, "topk": 4,
 "shared_experts": 2, "weight_bytes": 2}' >"$T/nolayers.json"
echo '{"hidden_size": 2048, "moe_intermediate_size": 1408, "num_experts": 8, "topk": 2,
 "shared_experts": 2, "weight_bytes": 2, "moe_layers": 2}' >"$T/m16.json"
expect 2 "decode on a trace whose model has no preset" "$EPLB" sim --compare decode \
  --trace "$T/t.eplbt" --cluster 2x4 --slots-per-gpu 3
check "no preset: one line asking for --model" "one_line 'give --model'"
expect 2 "--model with an unknown preset" "$EPLB" sim --compare decode --trace "$T/t.eplbt" \
  --cluster 2x4 --slots-per-gpu 3 --model llama-9
check "unknown preset: one line naming it" "one_line llama-9"
expect 2 "--model file missing a field" "$EPLB" sim --compare decode --trace "$T/t.eplbt" \
  --cluster 2x4 --slots-per-gpu 3 --model "$T/nolayers.json"
check "missing field: one line naming it" "one_line moe_layers"
expect 2 "--gpu file that does not exist" "$EPLB" sim --compare decode --trace "$T/t.eplbt" \
  --cluster 2x4 --slots-per-gpu 3 --model "$T/m16.json" --gpu "$T/nogpu.json"
expect 2 "--model with another expert count" "$EPLB" sim --compare decode --trace "$T/v2.eplbt" \
  --cluster 2x4 --slots-per-gpu 3 --model deepseek-v2-lite
check "expert count: one line naming both" "one_line '64 experts'"
expect 0 "decode with a model file" "$EPLB" sim --compare deepseek,balanced,decode \
  --trace "$T/t.eplbt" --cluster 2x4 --slots-per-gpu 3 --model "$T/m16.json" --gpu h20 \
  --split-per-batch --json
check "--json names the model and gives p99 step times" \
  "python3 -c \"import json; d = json.load(open('$T/out')); p = d['policies']; exit(0 if d['model'] == 'm16' and d['gpu'] == 'h20' and all(x['p99_step_time_us'] >= x['est_step_time_us'] * 0.5 for x in p) else 1)\""
# The CLI once handed the simulator the deployment's table, which costs links
# additively and without the kernels' latency: each of the 2 layers pays the
# dispatch and the combine kernel, 2 x 23 us on an h800.
expect 0 "a deployment's step time" "$EPLB" sim --policy deepseek --trace "$T/t.eplbt" \
  --cluster 2x4 --slots-per-gpu 3 --model "$T/m16.json" --gpu h800 --csv "$T/lat.csv"
check "a deployment's all-to-all has the kernels' latency" \
  "python3 -c \"import csv; r = list(csv.DictReader(open('$T/lat.csv'))); exit(0 if r and all(float(x['a2a_us']) >= 2 * 2 * 23 for x in r) else 1)\""
expect 0 "--compare table has p99 and active replicas" "$EPLB" sim --compare balanced \
  --trace "$T/t.eplbt" --cluster 2x4 --slots-per-gpu 2
check "table columns" "grep -q p99_step_time_us '$T/out' && grep -q max_active '$T/out'"

if command -v gnuplot >/dev/null 2>&1; then
  expect 0 "--plot" "$EPLB" sim --compare deepseek,balanced --trace "$T/t.eplbt" \
    --cluster 2x4 --slots-per-gpu 2 --plot "$T/p.png"
  check "plot is a PNG" "head -c 4 '$T/p.png' | grep -q PNG"
else
  skip "gnuplot not installed"
fi
tap_done
