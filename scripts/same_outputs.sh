#!/usr/bin/env bash
# Outputs byte-identical before and after a refactor (issue #34): runs the same
# CLI and daemon commands (every plan policy on trace, CSV and NPY input,
# --json, exports, robust shares, plan eval/diff, split, sim, topo, eplbd
# --once, and error cases) with two builds and compares stdout, stderr, exit
# status and every file written, timings and timestamps masked.
#   scripts/same_outputs.sh OLD_BINDIR NEW_BINDIR
# where each BINDIR holds eplb, eplbd and libeplb.so (copy them out of a build
# of each commit). Prints "IDENTICAL: N commands" or the differences (exit 1).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
S=$ROOT/traces/samples
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# run_all BINDIR OUTDIR
run_all() {
B=$1; O=$2; mkdir -p "$O"; W=$O/w; mkdir -p $W
export LD_LIBRARY_PATH=$B
E=$B/eplb; D=$B/eplbd
i=0
run() { i=$((i+1)); local f=$O/$(printf %03d $i); printf '%s\n' "$*" >$f.cmd; (cd $W && "$@" >$f.out 2>$f.err; echo $? >$f.rc); }
run $E trace convert --from topk-npy --experts 64 --tokens-per-step 256 $S/esft-dsv2lite/topk_ids.npy esft.eplbt
run $E trace gen --layers 3 --experts 64 --topk 4 --steps 12 --tokens-per-step 64 --seed 7 -o g.eplbt
run $E trace gen --layers 3 --experts 64 --topk 4 --steps 12 --tokens-per-step 64 --seed 5 --model deepseek-ai/DeepSeek-V2-Lite -o v2.eplbt
run $E plan --loads v2.eplbt --gpus 8 --replicas 72 --policy decode -o v2.json --json
run $E plan --loads v2.eplbt --gpus 8 --replicas 72 --policy decode --steps 2:6 --shares robust -o v2r.json
run $E trace gen --layers 3 --experts 64 --topk 4 --steps 2 --tokens-per-step 64 --seed 9 -o g2.eplbt
run $E trace convert g.eplbt g.csv
run $E trace convert g.eplbt g.npy
run $E trace info --json esft.eplbt
run $E trace stats esft.eplbt --ep 8,16 --json
for L in esft.eplbt g.csv g.npy; do
 for P in balanced deepseek incremental locality decode; do
  X=(); [[ $P == incremental ]] && X=(--from p0.json)
  [[ $P == locality ]] && X=(--cluster 2x4)
  [[ $P == decode ]] && X=(--model deepseek-v2-lite --gpu h100)
  run $E plan --loads $L --gpus 8 --nodes 2 --replicas 72 --policy $P "${X[@]}" -o p-$P-${L%%.*}.json --json
  run $E plan --loads $L --gpus 8 --nodes 2 --replicas 72 --policy $P "${X[@]}" -o q-$P-${L%%.*}.json
  [[ $P == balanced ]] && cp $W/p-$P-${L%%.*}.json $W/p0.json 2>/dev/null; true
 done
 run $E plan --loads $L --gpus 8 --replicas 72 --shares robust -o r-${L%%.*}.json --json
 run $E plan --loads $L --gpus 8 --replicas 72 --shares uniform --steps 2:9 -o u-${L%%.*}.json
 run $E plan --loads $L --gpus 8 --replicas 72 --steps 200: -o bad.json
 run $E plan --loads $L --gpus 8 --replicas 72 --policy decode --model deepseek-v2-lite --steps 3:5 -o dec.json --json
 run $E plan --loads $L --gpus 8 --replicas 72 --policy locality --cluster 2x4 --steps 3:5 -o loc.json --json
 run $E plan --loads $L --gpus 8 --replicas 72 --policy locality --cluster 3x4 -o loc.json
 run $E plan --loads $L --gpus 8 --replicas 72 --shares robust --steps 9: -o rb.json
 run $E plan --loads $L --gpus 8 --replicas 72 --export deepseek-csv ex-${L%%.*} -o pe.json --json
 run $E plan --loads $L --gpus 8 --replicas 72 --export sglang exs-${L%%.*} -o pe2.json
 run $E plan eval --plan pe.json --loads $L --json
 run $E plan eval --plan pe.json --loads $L
 run $E plan eval --plan pe.json --loads $L --steps 1:4
 run $E split --plan pe.json --loads $L --json
 run $E split --plan pe.json --loads $L
done
run $E plan --loads g2.eplbt --gpus 8 --replicas 72 --policy balanced -o w2.json --json
run $E plan --loads g.eplbt --gpus 8 --replicas 72 --policy mip --time-limit 2 -o mip.json
run $E plan diff --from p0.json --plan pe.json
run $E plan diff --from p0.json --plan pe.json --json
run $E plan diff --from p0.json --plan p-incremental-g.json --json
run $E plan diff --from p0.json --plan p-incremental-g.json
run $E plan --loads esft.eplbt --gpus 8 --replicas 72 --policy incremental -o x.json
run $E plan --loads esft.eplbt --gpus 8 --replicas 72 --policy locality -o x.json
run $E plan --loads g.csv --gpus 8 --replicas 72 --policy locality --cluster 2x4 -o x.json
run $E plan --loads g.csv --gpus 8 --replicas 72 --shares robust -o x.json
run $E plan --loads esft.eplbt --gpus 8 --replicas 72 --policy incremental --from w2.json -o x.json
for P in balanced deepseek incremental locality; do
 run $E sim --trace esft.eplbt --cluster 2x4 --replicas 72 --policy $P --json
 run $E sim --trace g.eplbt --cluster 2x4 --replicas 72 --policy $P
done
run $E sim --compare balanced,deepseek,balanced:robust,locality --trace esft.eplbt --slots-per-gpu 9 --cluster 2x4
run $E sim --compare balanced,deepseek --trace esft.eplbt --cluster 2x4 --slots-per-gpu 9 --json
run $E sim --trace esft.eplbt --cluster 2x4 --replicas 72 --policy balanced --rebalance-every 20 --window 10 --json
run $E sim --trace g.eplbt --cluster 2x4 --replicas 72 --policy balanced --plan-steps 0:6 --json
run $E sim --trace esft.eplbt --cluster 2x4 --replicas 72 --policy balanced --csv sim.csv
run $E topo show --cluster 2x4
run $E topo show --cluster 2x4 --json
run $D --trace esft.eplbt --out plans --once --gpus 8
run $D --trace esft.eplbt --out plans --once --gpus 8 --threshold -1
run $D --trace esft.eplbt --out plans --once --gpus 8 --threshold 0.5
run $D --trace g.eplbt --out plans2 --once --gpus 8 --replicas 72 --policy balanced
run $D --trace g.eplbt --out plans2 --once --gpus 8 --replicas 72 --policy balanced --threshold -1
run $D --trace g.eplbt --out plans3 --once --gpus 8 --replicas 72 --move-budget 2 --threshold -1
run $D --trace g.eplbt --out plans3 --once --gpus 8 --replicas 72 --move-budget 2 --threshold -1
run $E trace gen --layers 3 --experts 64 --topk 4 --steps 12 --tokens-per-step 64 --seed 11 -o gb.eplbt
run $E trace gen --layers 3 --experts 64 --topk 4 --steps 12 --tokens-per-step 640 --seed 12 -o gc.eplbt
run $D --trace g.eplbt --out pr --once --gpus 8 --replicas 72 --log-level debug
run $D --trace gb.eplbt --out pr --once --gpus 8 --replicas 72 --threshold 0.001 --log-level debug
run $D --trace gc.eplbt --out pr --once --gpus 8 --replicas 72 --threshold 0.001 --log-level debug
run $D --trace gb.eplbt --out pr --once --gpus 8 --replicas 72 --threshold 0.3 --log-level debug
run $D --trace gc.eplbt --out pr --once --gpus 8 --replicas 72 --threshold 0.02 --log-level debug
run $D --trace esft.eplbt --out pe --once --gpus 8 --window 20 --log-level debug
run $D --trace esft.eplbt --out pe --once --gpus 8 --window 5 --threshold 0.001 --log-level debug
run $D --trace esft.eplbt --out pe --once --gpus 8 --window 3 --threshold 0.05 --log-level debug
run $D --trace esft.eplbt --out pe --once --gpus 8 --window 3 --threshold 0.02 --log-level debug
run $D --trace esft.eplbt --out pe --once --gpus 8 --window 7 --threshold 0.02 --log-level debug
run $D --trace g.eplbt --out pf --once --gpus 8 --replicas 72 --policy balanced --log-level debug
run $D --trace gc.eplbt --out pf --once --gpus 8 --replicas 72 --policy balanced --threshold 0.001 --log-level debug
head -c 60000 $W/esft.eplbt > $W/cut.eplbt
python3 -c "
d=bytearray(open('$W/esft.eplbt','rb').read()); n=len(d)
for i in range(n//2, n//2+64): d[i]^=0x5a
open('$W/flip.eplbt','wb').write(d)"
for L in cut.eplbt flip.eplbt; do
 run $E plan --loads $L --gpus 8 --replicas 72 --policy locality --cluster 2x4 -o x.json
 run $E plan --loads $L --gpus 8 --replicas 72 --shares robust -o x.json
 run $E plan --loads $L --gpus 8 --replicas 72 --shares robust --steps 0:200 -o x.json
 run $E plan --loads $L --gpus 8 --replicas 72 --policy locality --cluster 2x4 --steps 100:130 -o x.json
 run $E plan --loads $L --gpus 8 --replicas 72 -o x.json
 run $E plan --loads $L --gpus 8 --replicas 72 --policy decode --model deepseek-v2-lite -o x.json
done
run $E plan --loads esft.eplbt --gpus 8 --replicas 72 --policy locality --cluster 2x4 --steps 5:5 -o x.json
run $E plan --loads esft.eplbt --gpus 8 --replicas 72 --policy locality --cluster 2x4 --steps 5:3 -o x.json
run $E plan --loads esft.eplbt --gpus 8 --replicas 72 --policy locality --cluster 2x4 --steps 129: -o x.json --json
run $E plan --loads esft.eplbt --gpus 8 --replicas 72 --policy locality --cluster 2x4 --steps 130: -o x.json --json
run $E plan --loads esft.eplbt --gpus 8 --replicas 72 --policy locality --cluster 2x4 --from p0.json -o x.json
run $E plan --loads g.eplbt --gpus 8 --replicas 72 --policy incremental --from p0.json --shares robust -o x.json --json
run $E plan --loads g.eplbt --gpus 8 --replicas 72 --policy decode --shares robust --model deepseek-v2-lite -o x.json --json
run $E plan --loads g.eplbt --gpus 8 --replicas 72 --policy locality --cluster 2x4 --shares robust -o x.json --json
run $E plan --loads g.eplbt --gpus 8 --replicas 72 --policy mip --shares robust --time-limit 1 -o x.json
run $E plan --loads g.eplbt --gpus 8 --replicas 72 --policy balanced --shares robust --robust-steps 3 --robust-aggregate 0.5 -o x.json --json
run $E plan --loads g.eplbt --gpus 8 --replicas 72 --policy locality --cluster 2x4 --export sglang exl -o x.json --json
run ls -R
# files written
for f in $(cd $W && find . -type f | sort); do run cat $f; done

}

normalise() {
  python3 - "$1" <<'PY'
import sys,re,os
d=sys.argv[1]
for n in sorted(os.listdir(d)):
    p=os.path.join(d,n)
    if not os.path.isfile(p): continue
    try: s=open(p,encoding="utf-8").read()
    except Exception: continue
    s2=re.sub(r'"(seconds|planning_seconds|elapsed[a-z_]*|plan_seconds|created[a-z_]*|time_s)": *[-0-9.e+]+', r'"\1": X', s)
    s2=re.sub(r'\d+\.\d+ s\b', 'X s', s2)
    s2=re.sub(r'\d{4}-\d\d-\d\dT[0-9:.]+Z', 'TS', s2)
    s2=re.sub(r'(seconds[ =:]+)[-0-9.e+]+', r'\1X', s2)
    if s2!=s: open(p,"w").write(s2)
PY
}

for side in old new; do
  dir=$1; [[ $side == new ]] && dir=$2
  run_all "$(cd "$dir" && pwd)" "$TMP/$side" >/dev/null 2>&1
  rm -rf "$TMP/$side/w"
  normalise "$TMP/$side"
done
if diff -r -x '*.cmd' "$TMP/old" "$TMP/new"; then
  echo "IDENTICAL: $(ls "$TMP"/new/*.cmd | wc -l) commands"
else
  exit 1
fi
