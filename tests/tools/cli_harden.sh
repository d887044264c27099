#!/usr/bin/env bash
# TAP test of the CLI under hostile input (issue 22, rows 4-6 and 9-13) and
# of honest exports (issue 15): sums that overflow, subnormal loads, step
# ranges past the end, outputs that are directories or in missing
# directories, doubled prefixes and control characters in messages,
# temporaries removed on SIGTERM and swept after a SIGKILL, a failing
# command that writes none of its outputs, a plan of 10^6 layers.
# usage: cli_harden.sh EPLB
set -u
EPLB=$1
. "$(dirname "$0")/../tap.sh"
fast() { timeout 10 "$@"; }
one_line_with() { # one line on stderr naming all of its arguments
  local desc=$1
  shift
  local good=1
  [[ $(wc -l <"$T/err") -eq 1 ]] || good=0
  for w in "$@"; do grep -qF -- "$w" "$T/err" || good=0; done
  if ((good)); then ok "$desc"; else notok "$desc"; sed 's/^/# /' "$T/err"; fi
}
check() { if eval "$2"; then ok "$1"; else notok "$1"; fi; }
no_tmp() { # no temporary of the target $1 is left
  local left
  left=$(ls -d "$1".tmp.* 2>/dev/null)
  if [[ -z $left ]]; then ok "$2"; else notok "$2: $left"; fi
}

"$EPLB" trace gen --layers 2 --experts 8 --topk 2 --steps 4 --tokens-per-step 64 --seed 1 \
  -o "$T/t.eplbt" >/dev/null 2>&1 || { echo "Bail out! trace gen failed"; exit 1; }

# ---- row 4: finite inputs whose sums overflow, a subnormal bandwidth
printf '1e308,1e308,1e308,1e308\n1,2,3,4\n' >"$T/big.csv"
expect 2 "plan: loads of 1e308 that sum to inf" fast "$EPLB" plan --loads "$T/big.csv" --gpus 2 \
  --replicas 4 -o "$T/big.json"
one_line_with "... one line naming the file, the layer and the limit" "big.csv: layer 0" "limit"
no_file "$T/big.json" "... no plan written"
"$EPLB" plan --loads "$T/t.eplbt" --gpus 2 --replicas 8 -o "$T/p8.json" >/dev/null 2>&1
printf '1,1,1,1,1,1,1,1\n1e308,1e308,1,1,1,1,1,1\n' >"$T/big8.csv"
expect 2 "plan eval: loads that overflow" fast "$EPLB" plan eval --plan "$T/p8.json" \
  --loads "$T/big8.csv" --json
one_line_with "... names the file and layer 1" "big8.csv: layer 1"
check "... and prints no JSON" "[[ ! -s $T/out ]]"
printf '{"format": "eplb-cluster", "version": 1, "nodes": [{"gpus": 2, "intra_node_gbps": 5e-324}]}\n' \
  >"$T/cl.json"
expect 2 "sim: a bandwidth of 5e-324" fast "$EPLB" sim --trace "$T/t.eplbt" --cluster "$T/cl.json" \
  --policy balanced --slots-per-gpu 4 --json
one_line_with "... names the field and the range" "intra_node_gbps" "1e-06"
expect 0 "sim --json of two policies" fast "$EPLB" sim --trace "$T/t.eplbt" --cluster 1x2 \
  --compare balanced,deepseek --slots-per-gpu 4 --json
check "... has both, every figure finite" "python3 -c \"
import json, math
d = json.load(open('$T/out'))
assert len(d['policies']) == 2
for p in d['policies']:
    assert all(math.isfinite(v) for v in p.values() if isinstance(v, float)), p
\""

# ---- row 10: subnormal loads keep the certificate true
printf '5e-324,5e-324,5e-324,1e-323\n1,2,3,4\n' >"$T/den.csv"
for pol in balanced deepseek; do
  expect 0 "plan --policy $pol on subnormal loads" fast "$EPLB" plan --loads "$T/den.csv" \
    --gpus 2 --replicas 6 --policy $pol -o "$T/den-$pol.json"
  expect 0 "... plan eval --json" fast "$EPLB" plan eval --plan "$T/den-$pol.json" \
    --loads "$T/den.csv" --json
  check "... balancedness <= 1, max load >= bound > 0 on every layer" "python3 -c \"
import json
d = json.load(open('$T/out'))
for l in d['layers']:
    assert 0 < l['balancedness'] <= 1, l
    assert l['max_load'] >= l['lower_bound'] > 0, l
    assert abs(sum(l['gpu_load']) - 2 * l['mean_load']) <= 2 * l['max_load'], l
\""
done

# ---- row 9: --steps past the end
expect 2 "plan --steps past the end" fast "$EPLB" plan --loads "$T/t.eplbt" --gpus 2 --replicas 8 \
  --steps 10:20 -o "$T/s.json"
one_line_with "... names the file and its steps" "t.eplbt" "4"
no_file "$T/s.json" "... no plan written"
expect 2 "plan eval --steps 4: (the trace has 4)" fast "$EPLB" plan eval --plan "$T/p8.json" \
  --loads "$T/t.eplbt" --steps 4:
one_line_with "... one line" "select no step"
expect 2 "plan --shares robust --steps past the end" fast "$EPLB" plan --loads "$T/t.eplbt" \
  --gpus 2 --replicas 8 --shares robust --steps 9: -o "$T/s.json"
expect 0 "plan --steps overlapping the end still plans" fast "$EPLB" plan --loads "$T/t.eplbt" \
  --gpus 2 --replicas 8 --steps 2:20 -o "$T/s.json"

# ---- row 11: exit 2 for unwritable outputs named by the user
mkdir -p "$T/dir"
expect 2 "sim --csv DIR" fast "$EPLB" sim --trace "$T/t.eplbt" --cluster 1x2 --policy balanced \
  --slots-per-gpu 4 --csv "$T/dir"
one_line_with "... says it is a directory" "is a directory"
expect 2 "sim --plot into a missing directory" fast "$EPLB" sim --trace "$T/t.eplbt" --cluster 1x2 \
  --policy balanced --slots-per-gpu 4 --plot "$T/nodir/x.png"
one_line_with "... names the directory" "nodir"
expect 2 "trace gen -o DIR, before generating" fast "$EPLB" trace gen --layers 2 --experts 8 \
  --topk 2 --steps 4 --tokens-per-step 64 --seed 1 -o "$T/dir"
one_line_with "... says it is a directory" "is a directory"
expect 2 "trace convert into a missing directory" fast "$EPLB" trace convert "$T/t.eplbt" \
  "$T/nodir/t.npy"
one_line_with "... names the directory" "nodir"
expect 2 "plan -o DIR" fast "$EPLB" plan --loads "$T/t.eplbt" --gpus 2 --replicas 8 -o "$T/dir"

# ---- row 12: messages
echo '{' >"$T/m1.json"
expect 2 "plan eval of a broken plan" fast "$EPLB" plan eval --plan "$T/m1.json" --loads "$T/t.eplbt"
check "... names the file once" "[[ \$(grep -o 'm1.json' '$T/err' | wc -l) -eq 1 ]]"
expect 2 "plan eval of a missing plan" fast "$EPLB" plan eval --plan "$T/none.json" --loads "$T/t.eplbt"
check "... names the file once" "[[ \$(grep -o 'none.json' '$T/err' | wc -l) -eq 1 ]]"
printf '1,2,3\n4,5,6\n' >"$T/shape.csv"
expect 2 "plan eval: loads of another shape" fast "$EPLB" plan eval --plan "$T/p8.json" \
  --loads "$T/shape.csv"
one_line_with "... names both files and shapes" "shape.csv: 2 layers x 3 experts" "p8.json has 2 x 8"
printf '1,2,3\n' >"$T/s1.csv"
"$EPLB" plan --loads "$T/s1.csv" --gpus 1 --replicas 3 -o "$T/s1.json" >/dev/null 2>&1
expect 2 "sim --plan of another shape" fast "$EPLB" sim --trace "$T/t.eplbt" --cluster 1x2 \
  --plan "$T/s1.json"
one_line_with "... names both files and shapes" "t.eplbt: 2 layers x 8 experts" "s1.json has 1 x 3"
expect 2 "plan --from of another shape" fast "$EPLB" plan --policy incremental --from "$T/s1.json" \
  --loads "$T/t.eplbt" --gpus 1 --replicas 8 -o "$T/z.json"
one_line_with "... names both files and shapes" "t.eplbt: 2 layers x 8 experts" "s1.json has 1 x 3"
printf '1,2\r\n3,x\ry\r\n' >"$T/cr.csv"
expect 2 "a CSV with carriage returns" fast "$EPLB" plan eval --plan "$T/p8.json" --loads "$T/cr.csv"
check "... no raw control character in the message" "! LC_ALL=C grep -q \$'[\\r\\x01-\\x08]' '$T/err' && [[ \$(wc -l <'$T/err') -eq 1 ]]"
expect 0 "plan --policy incremental --move-budget 0 (unlimited)" fast "$EPLB" plan \
  --policy incremental --from "$T/p8.json" --move-budget 0 --loads "$T/t.eplbt" --gpus 2 \
  --replicas 8 -o "$T/inc.json"

# ---- row 13: a plan of 10^6 layers is refused before it is parsed
python3 - "$T/huge.json" <<'PY'
import sys
layer = '{"phy2log":[0,1,2,3],"share":[1,1,1,1]}'
with open(sys.argv[1], "w") as f:
    f.write('{"format":"eplb-plan","version":1,"policy":"balanced","num_layers":1000000,'
            '"num_logical_experts":4,"num_gpus":2,"num_nodes":1,"num_groups":1,'
            '"keep_groups_on_nodes":false,"slots_per_gpu":[2,2],"layers":[')
    f.write(",".join([layer] * 1000000) + "]}")
PY
# Peak memory by GNU time where it exists (ulimit -v would stop ASan's shadow).
measure=()
[[ -x /usr/bin/time ]] && measure=(/usr/bin/time -f %M -o "$T/rss")
start=$(date +%s.%N)
expect 2 "plan eval of a 40 MB plan with 10^6 layers" "${measure[@]}" "$EPLB" plan eval \
  --plan "$T/huge.json" --loads "$T/t.eplbt"
secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}')
sed -i '/^Command exited/d' "$T/err"
one_line_with "... one line naming the limit" "4096"
check "... in under 2 s (${secs} s)" "awk 'BEGIN {exit !($secs < 2)}'"
if [[ -s $T/rss ]]; then
  kb=$(tail -1 "$T/rss")
  check "... within 200 MB (${kb} kB)" "[[ $kb -lt 200000 ]]"
else
  skip "... peak memory (no GNU time)"
fi

# Issue 18: 1000 layers of which only the first carries node shares (4096 node rows x 64
# slots, a 1 MB file): every layer's rows are checked before 2 GB are allocated for them.
python3 - "$T/ns.json" <<'PY'
import sys
R, N, L = 64, 4096, 1000
row = "[" + ",".join(["1"] * R) + "]"
first = '{"phy2log":[%s],"node_share":[%s]}' % (",".join(["0"] * R), ",".join([row] * N))
rest = '{"phy2log":[%s]}' % ",".join(["0"] * R)
with open(sys.argv[1], "w") as f:
    f.write('{"format":"eplb-plan","version":1,"policy":"locality","num_layers":%d,'
            '"num_logical_experts":1,"num_gpus":1,"num_nodes":1,"num_groups":1,'
            '"keep_groups_on_nodes":false,"slots_per_gpu":[%d],"layers":[' % (L, R))
    f.write(",".join([first] + [rest] * (L - 1)) + "]}")
PY
[[ -x /usr/bin/time ]] && measure=(/usr/bin/time -f %M -o "$T/rss2")
# Address space, not resident memory, is what the old reader took (calloc): capped at
# 1 GB where the build allows it (ASan's shadow needs terabytes of it).
vcap=(); ldd "$EPLB" 2>/dev/null | grep -q libasan || vcap=(bash -c 'ulimit -v 1000000 && exec "$@"' cap)
expect 2 "plan eval of a plan whose first layer claims node shares for all" "${measure[@]}" \
  "${vcap[@]}" "$EPLB" plan eval --plan "$T/ns.json" --loads "$T/t.eplbt"
sed -i '/^Command exited/d' "$T/err"
one_line_with "... one line naming the layer without its rows" "layer 1" "node_share"
if [[ -s $T/rss2 ]]; then
  kb=$(tail -1 "$T/rss2")
  check "... refused within 300 MB (${kb} kB), not 2 GiB" "[[ $kb -lt 300000 ]]"
else
  skip "... peak memory (no GNU time)"
fi

# ---- issue 15: an export that drops the plan's shares says so
expect 0 "plan --export sglang (exact shares)" fast "$EPLB" plan --loads "$T/t.eplbt" --gpus 2 \
  --replicas 10 --export sglang "$T/exp" -o "$T/pe.json" --json
one_line_with "... one line: the shares are dropped, the served balancedness" "carries no shares" \
  "serves balancedness"
check "... --json has served_balancedness below the planned figure" "python3 -c \"
import json
d = json.load(open('$T/out'))
assert d['served_shares'] == 'uniform'
assert d['served_balancedness'] < d['mean_balancedness'], d
\""
expect 0 "... the text summary says what is served" fast "$EPLB" plan --loads "$T/t.eplbt" \
  --gpus 2 --replicas 10 --export sglang "$T/exp" -o "$T/pe.json"
check "... a line for the export" "grep -q 'served by the sglang export' '$T/out'"
expect 0 "plan --shares uniform --export deepseek-csv" fast "$EPLB" plan --loads "$T/t.eplbt" \
  --gpus 2 --replicas 10 --shares uniform --export deepseek-csv "$T/exp" -o "$T/pu.json" --json
check "... no warning" "[[ ! -s $T/err ]]"
check "... served equals planned" "python3 -c \"
import json
d = json.load(open('$T/out'))
assert d['served_balancedness'] == d['mean_balancedness'], d
\""

# ---- row 6: a failing command writes none of its outputs
rm -rf "$T/exp6"
expect 2 "plan -o into a missing directory with --export" fast "$EPLB" plan --loads "$T/t.eplbt" \
  --gpus 2 --replicas 8 --export sglang "$T/exp6" -o "$T/nodir/p.json"
no_file "$T/exp6" "... the export directory is not made"
expect 2 "plan --export into a file" fast "$EPLB" plan --loads "$T/t.eplbt" --gpus 2 --replicas 8 \
  --export sglang "$T/p8.json" -o "$T/p6.json"
no_file "$T/p6.json" "... no plan written"
expect 2 "sim --csv with a --plot into a missing directory" fast "$EPLB" sim --trace "$T/t.eplbt" \
  --cluster 1x2 --policy balanced --slots-per-gpu 4 --csv "$T/s6.csv" --plot "$T/nodir/x.png"
no_file "$T/s6.csv" "... no CSV written"
expect 1 "sim --csv --plot without gnuplot" env PATH=/nonexistent "$EPLB" sim --trace "$T/t.eplbt" \
  --cluster 1x2 --policy balanced --slots-per-gpu 4 --csv "$T/s6.csv" --plot "$T/s6.png"
no_file "$T/s6.csv" "... no CSV written"
no_file "$T/s6.png" "... no plot written"
no_tmp "$T/s6.csv" "... no temporary left"
mkdir -p "$T/exp7"
echo keep >"$T/exp7/mine.txt"
expect 0 "plan --export into an existing directory" fast "$EPLB" plan --loads "$T/t.eplbt" \
  --gpus 2 --replicas 8 --export deepseek-csv "$T/exp7" -o "$T/p7.json"
check "... its files added, others kept" "[[ -s $T/exp7/phy2log.csv && -s $T/exp7/logcnt.csv && -s $T/exp7/mine.txt ]]"
no_tmp "$T/exp7" "... no staging directory left"
check "... nor one inside it" "[[ -z \$(ls -A '$T/exp7' | grep tmp) ]]"

# ---- row 5: SIGTERM/SIGINT remove the temporary; a later write sweeps what SIGKILL left
# Runs CMD in the background, waits for a temporary of TARGET, sends SIG.
interrupt() {
  local sig=$1 target=$2
  shift 2
  "$@" >/dev/null 2>&1 &
  local pid=$! seen=0
  for _ in $(seq 1 2000); do
    if compgen -G "$target.tmp.*" >/dev/null; then seen=1; break; fi
    kill -0 $pid 2>/dev/null || break
    sleep 0.01
  done
  kill -"$sig" $pid 2>/dev/null
  wait $pid
  local rc=$?
  if ((seen)); then ok "$sig during $(basename "$target"): temporary seen, then the run died (exit $rc)"
  else skip "$sig during $(basename "$target"): finished before a temporary was seen"; fi
}
interrupt TERM "$T/gen.eplbt" "$EPLB" trace gen --layers 16 --experts 64 --topk 4 --steps 200000 \
  --tokens-per-step 256 --seed 2 -o "$T/gen.eplbt"
no_tmp "$T/gen.eplbt" "... trace gen leaves no temporary"
no_file "$T/gen.eplbt" "... and no target"
"$EPLB" trace gen --layers 16 --experts 64 --topk 4 --steps 3000 --tokens-per-step 256 --seed 2 \
  -o "$T/src.eplbt" >/dev/null 2>&1
interrupt INT "$T/conv.npy" "$EPLB" trace convert "$T/src.eplbt" "$T/conv.npy"
no_tmp "$T/conv.npy" "... trace convert leaves no temporary"
"$EPLB" trace gen --layers 512 --experts 64 --topk 2 --steps 2 --tokens-per-step 64 --seed 3 \
  -o "$T/wide.eplbt" >/dev/null 2>&1
interrupt TERM "$T/wide.json" "$EPLB" plan --loads "$T/wide.eplbt" --gpus 64 --replicas 4096 \
  --export deepseek-csv "$T/wexp" -o "$T/wide.json"
no_tmp "$T/wide.json" "... plan -o leaves no temporary"
no_tmp "$T/wexp" "... nor an export staging directory"
# What a SIGKILL leaves: a dead writer's temporary unwritten for a minute
# goes; a live writer's, a fresh one and another target's stay.
dead=999999
while kill -0 $dead 2>/dev/null; do dead=$((dead - 1)); done
: >"$T/p8.json.tmp.$dead.aB3dE9"
: >"$T/p8.json.tmp.$dead.fresh1"
: >"$T/p8.json.tmp.$$.live12"
: >"$T/p8.json.tmp.Xy12Zw"
: >"$T/p8.json.tmp.$dead.x-y"
: >"$T/other.json.tmp.$dead.aB3dE9"
touch -d '2 hours ago' "$T/p8.json.tmp.$dead.aB3dE9" "$T/p8.json.tmp.$$.live12" \
  "$T/p8.json.tmp.Xy12Zw" "$T/p8.json.tmp.$dead.x-y" "$T/other.json.tmp.$dead.aB3dE9"
expect 0 "plan -o over a target with stale temporaries" fast "$EPLB" plan --loads "$T/t.eplbt" \
  --gpus 2 --replicas 8 -o "$T/p8.json"
no_file "$T/p8.json.tmp.$dead.aB3dE9" "... a dead writer's old temporary is removed"
no_file "$T/p8.json.tmp.Xy12Zw" "... an untagged temporary over an hour old is removed"
check "... a fresh one, a live writer's, another pattern's and another target's stay" \
  "[[ -e $T/p8.json.tmp.$dead.fresh1 && -e $T/p8.json.tmp.$$.live12 && -e $T/p8.json.tmp.$dead.x-y && -e $T/other.json.tmp.$dead.aB3dE9 ]]"
# Staging directories of a killed --export: beside a new export directory, and inside
# an existing one (its files with it); a live writer's stays.
mkdir -p "$T/kexp" "$T/kexp.tmp.$dead.Qw12Er" "$T/kexp/.tmp.$dead.Zx34Cv" "$T/kexp.tmp.$$.Li56Ve"
: >"$T/kexp.tmp.$dead.Qw12Er/phy2log.csv"
: >"$T/kexp/.tmp.$dead.Zx34Cv/logcnt.csv"
touch -d '2 hours ago' "$T/kexp.tmp.$dead.Qw12Er" "$T/kexp/.tmp.$dead.Zx34Cv" "$T/kexp.tmp.$$.Li56Ve"
expect 0 "plan --export over a directory with stale staging" fast "$EPLB" plan --loads "$T/t.eplbt" \
  --gpus 2 --replicas 8 -o "$T/p9.json" --export deepseek-csv "$T/kexp"
no_file "$T/kexp.tmp.$dead.Qw12Er" "... a dead export's staging beside it is removed"
no_file "$T/kexp/.tmp.$dead.Zx34Cv" "... and the one inside it"
check "... a live writer's staging stays" "[[ -d $T/kexp.tmp.$$.Li56Ve ]]"

# ---- issue 33, F16: messages that state the problem
expect 2 "an unknown command" "$EPLB" frob
one_line_with "... is one line naming it" "unknown command 'frob'"
expect 2 "plan --gpus 0" "$EPLB" plan --loads "$T/t.eplbt" --gpus 0 --replicas 8 -o "$T/g0.json"
one_line_with "... names the option and the minimum, not the usage" "--gpus 0" "at least 1"
expect 2 "plan --replicas 0" "$EPLB" plan --loads "$T/t.eplbt" --gpus 2 --replicas 0 \
  -o "$T/g0.json"
one_line_with "... names the option" "--replicas 0" "at least"
"$EPLB" plan --loads "$T/t.eplbt" --gpus 2 --replicas 8 -o "$T/p16.json" >/dev/null 2>&1
printf '1,2,3,4,5,6,7,8\n8,7,6,5,4,3,2,1\n' >"$T/l16.csv"
expect 0 "split --tolerance 5e-324 (a subnormal double)" "$EPLB" split --plan "$T/p16.json" \
  --loads "$T/l16.csv" --tolerance 5e-324
expect 2 "split --tolerance 1e400" "$EPLB" split --plan "$T/p16.json" --loads "$T/l16.csv" \
  --tolerance 1e400
one_line_with "... is out of range, not 'expected a number'" "1e400" "out of the range"
printf '9007199254741000,1,1,1,1,1,1,1\n1,1,1,1,1,1,1,1\n' >"$T/l53.csv"
expect 2 "split --integer with a load of 2^53 + 8" "$EPLB" split --plan "$T/p16.json" \
  --loads "$T/l53.csv" --integer
one_line_with "... states the 2^53 limit" "2^53" "9007199254741000"
python3 -c "
import json
d = json.load(open('$T/p16.json'))
sh = d['layers'][0]['share']
sh[sh.index(1.0)] = 1.0000001
json.dump(d, open('$T/s16.json', 'w'))"
expect 2 "plan eval: a share of 1.0000001" "$EPLB" plan eval --plan "$T/s16.json" --loads "$T/t.eplbt"
one_line_with "... prints the share with its digits" "share 1.0000001" "not in [0, 1]"

tap_done
