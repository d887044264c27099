#!/usr/bin/env bash
# TAP test of the input limits (issue 18): every oversized input is refused up
# front, at once (under 5 s here), with exit 2 and one line naming the number
# and the limit; nothing is written that `eplb` cannot read back.
# usage: cli_limits.sh EPLB FIXTURES_DIR
set -u
EPLB=$1
FIXTURES=$2
. "$(dirname "$0")/../tap.sh"
fast() { timeout 5 "$@"; }
# Work bounded by the input, where the unbounded work took minutes to hours:
# a generous limit, so that a loaded CI machine (or ASan) cannot fail it.
bounded() { timeout 120 "$@"; }
one_line_with() { # one line naming all of its arguments
  local desc=$1
  shift
  local good=1
  [[ $(wc -l <"$T/err") -eq 1 ]] || good=0
  for w in "$@"; do grep -q -- "$w" "$T/err" || good=0; done
  if ((good)); then ok "$desc"; else notok "$desc"; sed 's/^/# /' "$T/err"; fi
}

"$EPLB" trace gen --layers 2 --experts 8 --topk 2 --steps 4 --tokens-per-step 64 --seed 1 \
  -o "$T/t.eplbt" >/dev/null 2>&1 || { echo "Bail out! trace gen failed"; exit 1; }

# Row 1/2: the planner refuses what the plan reader refuses, and work out of proportion.
expect 2 "plan --gpus 70000" fast "$EPLB" plan --loads "$T/t.eplbt" --gpus 70000 --replicas 70000 \
  -o "$T/p70k.json"
one_line_with "--gpus 70000: names the number and the limit" 70000 65536
no_file "$T/p70k.json" "--gpus 70000: no plan written"
expect 2 "plan --gpus 16777216" fast "$EPLB" plan --loads "$T/t.eplbt" --gpus 16777216 \
  --replicas 16777216 -o "$T/p.json"
one_line_with "--gpus 16777216: names the number and the limit" 16777216 65536
expect 2 "plan --gpus 1000000 --replicas 1000000" fast "$EPLB" plan --loads "$T/t.eplbt" \
  --gpus 1000000 --replicas 1000000 -o "$T/p.json"
one_line_with "--gpus 1000000: names the number and the limit" 1000000 65536
expect 2 "plan --replicas 1000000 on 8 GPUs" fast "$EPLB" plan --loads "$T/t.eplbt" --gpus 8 \
  --replicas 1000000 -o "$T/p.json"
one_line_with "--replicas 1000000: names the number and the limit" 1000000 65536
expect 2 "plan 65536 GPUs x 65536 replicas" fast "$EPLB" plan --loads "$T/t.eplbt" --gpus 65536 \
  --replicas 65536 -o "$T/p.json"
one_line_with "65536 x 65536: names the product and the limit" 4294967296 268435456
no_file "$T/p.json" "no plan written"
expect 0 "plan at the limits' scale is read back" fast "$EPLB" plan --loads "$T/t.eplbt" \
  --gpus 4096 --replicas 4096 -o "$T/p4k.json"
expect 0 "plan eval reads it" fast "$EPLB" plan eval --plan "$T/p4k.json" --loads "$T/t.eplbt"

expect 2 "cluster 4096x1024" fast "$EPLB" topo show --cluster 4096x1024
one_line_with "4096x1024: names the GPUs and the limit" 4194304 65536

# Row 2: the simulator.
expect 2 "sim --slots-per-gpu 1000000" fast "$EPLB" sim --trace "$T/t.eplbt" --cluster 2x4 \
  --policy balanced --slots-per-gpu 1000000
one_line_with "--slots-per-gpu: names the number and the limit" 8000000 65536
expect 2 "sim --slots-per-gpu 4294967295" fast "$EPLB" sim --trace "$T/t.eplbt" --cluster 2x4 \
  --policy balanced --slots-per-gpu 4294967295
expect 2 "sim on 4096 nodes" fast "$EPLB" sim --trace "$T/t.eplbt" --cluster 4096x1 \
  --policy balanced --slots-per-gpu 1
one_line_with "4096 nodes: names the number and the limit" 4096 1024

# Row 3: a long CSV implying 10^18 steps.
printf 'step,layer,expert,count\n0,0,0,1\n1000000000000000000,0,1,2\n' >"$T/big.csv"
expect 2 "csv step 10^18" fast "$EPLB" trace convert "$T/big.csv" "$T/big.eplbt"
one_line_with "csv step 10^18: names the number and the limit" 1000000000000000000 4294967296
no_file "$T/big.eplbt" "csv step 10^18: nothing written"
printf 'step,layer,expert,count\n0,0,0,1\n100000000,0,1,2\n' >"$T/sparse.csv"
expect 2 "csv with 10^8 steps from 2 rows" fast "$EPLB" trace convert "$T/sparse.csv" \
  "$T/sparse.eplbt"
one_line_with "sparse csv: names the steps and the limit" 100000001 1048576
# Issue 33, F4: counts implied beyond the rows (each is written): one 44-byte
# row naming layer 4095 and expert 65534 cost 2^28 counts (3 GB, 16 s).
printf 'step,layer,expert,count\n0,4095,65534,1\n' >"$T/wide.csv"
expect 2 "csv: one row implying 2^28 counts" fast "$EPLB" trace convert "$T/wide.csv" \
  "$T/wide.eplbt"
one_line_with "... names the counts and the limit" 268431360 16777216 "4096 per row"
no_file "$T/wide.eplbt" "... nothing written"
printf 'step,layer,expert,count\n1048575,4095,65534,1\n' >"$T/wide2.csv"
expect 2 "csv: one row at step 2^20 - 1 implying 2^48 counts" fast "$EPLB" trace convert \
  "$T/wide2.csv" "$T/wide.eplbt"
one_line_with "... names the counts and the limit" 281470681743360 16777216
expect 2 "plan --loads of that csv: refused the same" fast "$EPLB" plan --loads "$T/wide.csv" \
  --gpus 1 --replicas 65535 -o "$T/wide.json"
one_line_with "... names the counts and the limit" 268431360 16777216
printf 'step,layer,expert,count\n0,63,4095,1\n7,0,0,2\n' >"$T/ok.csv"
expect 0 "csv: 2^21 counts from 2 rows (within 2^24) convert" fast "$EPLB" trace convert \
  "$T/ok.csv" "$T/ok.eplbt"

# Row 4: trace gen with 2^32-1 tokens per step.
expect 2 "trace gen 2^32-1 tokens per step" fast "$EPLB" trace gen --layers 1 --experts 8 \
  --topk 2 --steps 1 --tokens-per-step 4294967295 -o "$T/g.eplbt"
one_line_with "tokens per step: names the number and the limit" 4294967295 16777216
expect 2 "trace gen: a step's top-k rows over 1 GiB" fast "$EPLB" trace gen --layers 4096 \
  --experts 64 --topk 64 --steps 1 --tokens-per-step 16777216 -o "$T/g.eplbt"
one_line_with "top-k rows: names the limit" "1 GiB"
no_file "$T/g.eplbt" "trace gen: nothing written"

# Row 5: hwloc synthetic descriptions with too many objects (hwloc's time is
# quadratic in them: "pack:256 core:256 pu:1" took minutes under the old limit).
for syn in "pack:256 core:256 pu:1" "pack:4096 pu:1" "pack:1000 core:1000 pu:1" "pack:100000 core:100000 numa:10000 pu:1" \
  "pack:4294967296 pu:1" "pack:2(memory=1GB) [numa(memory=1GB)] core:100000 pu:1000"; do
  echo "{\"format\": \"eplb-cluster\", \"version\": 1,
  \"nodes\": [{\"name\": \"s\", \"gpus\": 2, \"synthetic\": \"$syn\"}]}" >"$T/syn.json"
  expect 2 "topo show: synthetic '$syn'" fast "$EPLB" topo show --cluster "$T/syn.json"
  one_line_with "synthetic '$syn': names the limit" 4096 objects
  expect 2 "sim --cluster: synthetic '$syn'" fast "$EPLB" sim --trace "$T/t.eplbt" \
    --cluster "$T/syn.json" --policy balanced --slots-per-gpu 1
done
echo '{"format": "eplb-cluster", "version": 1,
  "nodes": [{"name": "s", "gpus": 2, "synthetic": "pack:2 numa:1 core:2 pu:1"}]}' >"$T/syn.json"
expect 0 "topo show: a small synthetic node" fast "$EPLB" topo show --cluster "$T/syn.json"
expect 0 "topo show: the fixture" fast "$EPLB" topo show --cluster "$FIXTURES/cluster-hetero.json"
# Issue 33, F5: many entries, each within the limit. One description on 4,096
# entries is built once (27 s before); distinct ones share a budget of 8,192
# objects per file (64 entries of 4,094 PUs took 52 s).
python3 -c "
import json
json.dump({'nodes': [{'name': 'n%d' % i, 'gpus': 8, 'synthetic': 'pack:4 core:32 pu:16'}
                     for i in range(4096)]}, open('$T/syn4096.json', 'w'))
json.dump({'nodes': [{'gpus': 8, 'synthetic': 'pack:4 core:%d pu:16' % (32 - i)}
                     for i in range(24)]}, open('$T/syn64.json', 'w'))
json.dump({'nodes': [{'gpus': g, 'synthetic': 'pack:4 core:32 pu:16'} for g in range(1, 65)]},
          open('$T/syn64g.json', 'w'))"
expect 0 "topo show: one synthetic description on 4,096 nodes" bounded "$EPLB" topo show \
  --cluster "$T/syn4096.json" --json
expect 2 "topo show: 24 distinct synthetic descriptions of ~2,000 objects" bounded "$EPLB" topo show \
  --cluster "$T/syn64.json"
one_line_with "... names the description, the file's total and the limit" "nodes\[3\]" 6336 8192
expect 2 "topo show: one description with 64 GPU counts (each loaded apart)" bounded "$EPLB" topo \
  show --cluster "$T/syn64g.json"
one_line_with "... names the limit" "nodes\[3\]" 8192

# Row 6: a FIFO with no writer is refused at once.
mkfifo "$T/fifo"
expect 2 "plan eval --plan FIFO" fast "$EPLB" plan eval --plan "$T/fifo" --loads "$T/t.eplbt"
one_line_with "FIFO: not a regular file" "not a regular file"
expect 2 "plan --loads FIFO" fast "$EPLB" plan --loads "$T/fifo" --gpus 8 --replicas 8 \
  -o "$T/p.json"
one_line_with "plan --loads FIFO: not a regular file" "not a regular file"
expect 2 "trace info FIFO" fast "$EPLB" trace info "$T/fifo"
expect 2 "trace convert FIFO (csv)" fast "$EPLB" trace convert "$T/fifo" "$T/x.eplbt" --from csv
expect 2 "trace convert FIFO (npy)" fast "$EPLB" trace convert "$T/fifo" "$T/x.eplbt" \
  --from counts-npy
expect 2 "trace recover FIFO" fast "$EPLB" trace recover "$T/fifo" "$T/x.eplbt"
expect 2 "sim --cluster FIFO" fast "$EPLB" sim --trace "$T/t.eplbt" --cluster "$T/fifo" \
  --policy balanced --slots-per-gpu 1
expect 2 "topo show --cluster FIFO" fast "$EPLB" topo show --cluster "$T/fifo"
one_line_with "topo show FIFO: not a regular file" "not a regular file"
expect 2 "a directory as a trace" fast "$EPLB" trace info "$T"

# Option values the library checks (eplb_plan_options_check, eplb_sim_options_check,
# eplb_synth_options_check, eplb_trace_stats, eplb_trace_convert): exit 2 and one line
# naming the option (not the library's field), its value and the problem, before any work.
bad_value() { # OPTION VALUE PROBLEM -- command...
  local opt=$1 val=$2 problem=$3
  shift 4
  expect 2 "$opt $val" fast "$@"
  one_line_with "$opt $val: names the option, the value and the problem" "^eplb: $opt $val: " \
    "$problem"
}
PLAN=("$EPLB" plan --loads "$T/t.eplbt" --gpus 2 --replicas 8 -o "$T/pv.json")
bad_value --threads 2000 "must be 0..1024" -- "${PLAN[@]}" --threads 2000
bad_value --time-limit -1 "must be >= 0" -- "${PLAN[@]}" --time-limit -1
bad_value --tolerance -0.5 "must be >= 0" -- "${PLAN[@]}" --tolerance -0.5
bad_value --move-weight -1 "must be a finite number >= 0" -- "${PLAN[@]}" --move-weight -1
bad_value --robust-steps 0 "must be in 1..65536" -- "${PLAN[@]}" --robust-steps 0
bad_value --robust-aggregate 2 "must be in \[0, 1\]" -- "${PLAN[@]}" --robust-aggregate 2
no_file "$T/pv.json" "bad plan option values: no plan written"
SIM=("$EPLB" sim --trace "$T/t.eplbt" --cluster 1x2 --policy balanced --slots-per-gpu 4)
bad_value --threads 2000 "must be 0..1024" -- "${SIM[@]}" --threads 2000
bad_value --split-tolerance 2 "must be in \[0, 1\]" -- "${SIM[@]}" --split-tolerance 2
bad_value --robust-steps 70000 "must be in 1..65536" -- "${SIM[@]}" --robust-steps 70000
GEN=("$EPLB" trace gen --layers 2 --experts 8 --topk 2 --steps 2 -o "$T/gv.eplbt")
bad_value --drift 2 "must be in \[0, 1\]" -- "${GEN[@]}" --drift 2
bad_value --skew -1 "must be in \[0, 100\]" -- "${GEN[@]}" --skew zipf:-1
bad_value --tenants 9 "exceeds --ranks 8" -- "${GEN[@]}" --rank-affinity 0.5 --ranks 8 --tenants 9
bad_value --topk 9 "must be 1..min(64, --experts)" -- "${GEN[@]}" --topk 9
no_file "$T/gv.eplbt" "bad trace gen option values: no trace written"
bad_value --tokens-per-step 0 "must be >= 1" -- "$EPLB" trace convert --tokens-per-step 0 \
  "$T/t.eplbt" "$T/cv.csv"
bad_value --ep 16 "must be within 1..8" -- "$EPLB" trace stats "$T/t.eplbt" --ep 16
bad_value --steps 9 "selects no step" -- "$EPLB" trace stats "$T/t.eplbt" --steps 9:

tap_done
