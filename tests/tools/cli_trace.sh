#!/usr/bin/env bash
# TAP test of `eplb trace` exit codes, messages and outputs.
# usage: cli_trace.sh EPLB SAMPLES_DIR
set -u
EPLB=$1
SAMPLES=$2
. "$(dirname "$0")/../tap.sh"
json() { python3 -c "import json,sys; d=json.load(open('$T/out')); print($1)"; }

expect 2 "no arguments is a usage error" "$EPLB"
expect 2 "unknown command" "$EPLB" frobnicate
expect 0 "version" "$EPLB" version

# Real data: the bundled ESFT top-k array.
expect 0 "convert ESFT topk_ids.npy" "$EPLB" trace convert --from topk-npy --experts 64 \
  --tokens-per-step 256 "$SAMPLES/esft-dsv2lite/topk_ids.npy" "$T/esft.eplbt"
expect 0 "info --json" "$EPLB" trace info --json "$T/esft.eplbt"
[[ $(json 'd["layers"], d["experts"], d["topk"], d["tokens"], d["steps"], d["has_topk"]') == \
  "26 64 6 33279 130 True" ]] && ok "ESFT shape, tokens and steps" || notok "ESFT shape: $(cat "$T/out")"
expect 0 "stats --json" "$EPLB" trace stats "$T/esft.eplbt" --ep 8,16 --json
r=$(json 'all(l["busiest_expert_over_mean"] >= 1 and l["busiest_gpu_over_mean"]["8"] >= 1 for l in d["layers"]) and len(d["layers"]) == 26')
[[ $r == True ]] && ok "stats ratios are >= 1 for every layer" || notok "stats ratios"
expect 2 "stats --ep larger than experts" "$EPLB" trace stats "$T/esft.eplbt" --ep 128

# Round trip: native -> csv -> native -> csv gives identical csv.
expect 0 "native to csv" "$EPLB" trace convert "$T/esft.eplbt" "$T/a.csv"
expect 0 "csv to native" "$EPLB" trace convert "$T/a.csv" "$T/b.eplbt"
expect 0 "native to csv again" "$EPLB" trace convert "$T/b.eplbt" "$T/b.csv"
cmp -s "$T/a.csv" "$T/b.csv" && ok "csv round trip is identical" || notok "csv round trip differs"
expect 0 "native to npy counts" "$EPLB" trace convert "$T/esft.eplbt" "$T/c.npy"
expect 0 "npy counts to csv" "$EPLB" trace convert "$T/c.npy" "$T/c.csv"
cmp -s "$T/a.csv" "$T/c.csv" && ok "npy round trip is identical" || notok "npy round trip differs"

# Generator: deterministic by seed.
gen() { "$EPLB" trace gen --layers 3 --experts 32 --topk 4 --steps 12 --tokens-per-step 64 "$@"; }
expect 0 "gen seed 7" gen --seed 7 -o "$T/g1.eplbt"
expect 0 "gen seed 7 again" gen --seed 7 -o "$T/g2.eplbt"
expect 0 "gen seed 8" gen --seed 8 -o "$T/g3.eplbt"
cmp -s "$T/g1.eplbt" "$T/g2.eplbt" && ok "same seed, same file" || notok "same seed differs"
cmp -s "$T/g1.eplbt" "$T/g3.eplbt" && notok "different seed, same file" || ok "different seed, different file"
expect 2 "gen without -o" gen --seed 1
expect 2 "gen with a bad skew" gen --seed 1 --skew pareto:2 -o "$T/x.eplbt"
expect 2 "gen with a non-numeric --steps" "$EPLB" trace gen --steps ten -o "$T/x.eplbt"
[[ ! -e $T/x.eplbt ]] && ok "no output after bad gen arguments" || notok "output left behind"

# Damaged files.
size=$(stat -c %s "$T/esft.eplbt")
head -c $((size - 100)) "$T/esft.eplbt" >"$T/cut.eplbt"
expect 2 "truncated file is bad input" "$EPLB" trace info "$T/cut.eplbt"
one_line_naming cut.eplbt "truncation message is one line naming the file"
expect 0 "recover the truncated file" "$EPLB" trace recover "$T/cut.eplbt" "$T/rec.eplbt"
expect 0 "recovered file opens" "$EPLB" trace info --json "$T/rec.eplbt"
steps=$(json 'd["steps"]')
[[ $steps -gt 0 && $steps -lt 130 ]] && ok "recovered $steps of 130 steps" || notok "recovered $steps steps"
cp "$T/esft.eplbt" "$T/flip.eplbt"
printf '\xff' | dd of="$T/flip.eplbt" bs=1 seek=$((size / 2)) conv=notrunc status=none
expect 2 "a flipped byte is detected" "$EPLB" trace stats "$T/flip.eplbt"
one_line_naming flip.eplbt "corruption message names the file"
echo "this is not a trace" >"$T/text.eplbt"
expect 2 "wrong magic" "$EPLB" trace info "$T/text.eplbt"
: >"$T/empty.eplbt"
expect 2 "empty file" "$EPLB" trace info "$T/empty.eplbt"
expect 2 "missing file" "$EPLB" trace info "$T/nope.eplbt"
expect 2 "unwritable output" "$EPLB" trace convert "$T/esft.eplbt" "$T/no/such/dir/x.csv"
printf 'step,layer,expert,count\n0,0,0,5\n0,0,1,-3\n' >"$T/neg.csv"
expect 2 "negative count in csv" "$EPLB" trace convert "$T/neg.csv" "$T/neg.eplbt"
one_line_naming neg.csv "csv error names the file"
[[ ! -e $T/neg.eplbt ]] && ok "no partial output after a bad csv" || notok "partial output left"
printf 'step,layer,expert,count\n0,0,0,abc\n' >"$T/nan.csv"
expect 2 "non-numeric count in csv" "$EPLB" trace convert "$T/nan.csv" "$T/nan.eplbt"

tap_done
