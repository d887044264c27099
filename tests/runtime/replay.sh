#!/usr/bin/env bash
# TAP test of `mpirun -np 4 eplb replay`: zero violations with rebalancing,
# with an injected transfer failure, and bad-input exit codes.
# usage: replay.sh EPLB MPIRUN
set -u
EPLB=$1
MPIRUN=$2
T=$(mktemp -d "${TMPDIR:-/tmp}/replay.XXXXXX")
trap 'rm -rf "$T"' EXIT
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"; sed 's/^/# /' "$T/err"; }
has() { grep -q -- "$1" "$T/out"; }
mpi4() { "$MPIRUN" --oversubscribe -np 4 "$EPLB" replay "$@" >"$T/out" 2>"$T/err"; }

"$EPLB" trace gen --layers 6 --experts 16 --topk 4 --steps 32 --tokens-per-step 256 --seed 5 \
  --switch-every 16 -o "$T/t.eplbt" >/dev/null 2>"$T/err" || notok "trace gen"

# One run (MPI start-up dominates): rebalancing moves slots across ranks and
# nodes, rank 3 fails its first migration of layer 2, and every token still
# lands on a slot holding its expert.
if mpi4 --trace "$T/t.eplbt" --slots-per-gpu 6 --ranks-per-node 2 --rebalance-every 8 \
  --expert-bytes 256 --inject-failure 2 --json; then ok "replay runs"; else notok "replay runs"; fi
if has '"violations": 0' && has '"mean_balancedness_static"'; then ok "zero violations"
else notok "zero violations"; fi
if ! has '^  "rebalances": 0,' && ! has '^  "slots_moved": 0,' && ! has '"inter_node": 0'; then
  ok "slots moved, across nodes too"
else notok "slots moved"; fi
if has '"layers_failed": 1' && has '"failed_steps": 1'; then
  ok "the injected transfer failure is reported and the layer keeps its plan"
else notok "injected transfer failure"; fi

# The counting thread changes where ids are counted, not the counts: the
# same replay with it is identical (plans, moves, balancedness, per step;
# all but the wall times).
A=(--trace "$T/t.eplbt" --slots-per-gpu 6 --ranks-per-node 2 --rebalance-every 8
  --expert-bytes 256 --json)
if mpi4 "${A[@]}" && mv "$T/out" "$T/inline.json" && mpi4 "${A[@]}" --count-thread &&
  has '"violations": 0' && python3 -c "import json, sys
a, b = json.load(open('$T/out')), json.load(open('$T/inline.json'))
for d in (a, b):  # wall times differ run to run
    d.pop('split_us_median'), d.pop('allreduce_us_median')
sys.exit(0 if a == b else 1)"; then
  ok "replay with --count-thread is identical"
else notok "replay with --count-thread is identical"; fi

# The per-batch split (on by default with 4 ranks): zero violations, every
# rank's route re-splits, and held out (first plan on steps 0-15, scored on
# 16-31, where the trace switches domain) it beats the plans' static shares.
B=(--trace "$T/t.eplbt" --slots-per-gpu 6 --ranks-per-node 2 --rebalance-every 8
  --expert-bytes 256 --json)
if mpi4 "${B[@]}" --no-split-per-batch && mv "$T/out" "$T/static.json" && mpi4 "${B[@]}" &&
  python3 -c "import json, sys
s, d = json.load(open('$T/static.json')), json.load(open('$T/out'))
ok = (d['violations'] == 0 and d['plan_steps'] == [0, 16] and d['scored_steps'] == 16
      and s['mean_balancedness_split'] is None and d['split_us_median'] > 0
      and d['allreduce_us_median'] > 0
      and d['mean_balancedness_split'] == d['mean_balancedness']
      and d['mean_balancedness'] > s['mean_balancedness'] + 0.02
      and sum(p['scored'] for p in d['per_step']) == 16)
print('# split %.4f, static shares %.4f' % (d['mean_balancedness'], s['mean_balancedness']))
sys.exit(0 if ok else 1)"; then ok "per-batch split: held out, above the static shares, 0 violations"
else notok "per-batch split: held out, above the static shares, 0 violations"; fi
# Continuous re-placement (the default with several ranks and the split): a
# few slots move every step, staged or in place, with a stalled sender; held
# out it beats the first plan re-split per batch, which beats its static
# shares, and no token ever lands on a slot without its expert's bytes.
C=(--trace "$T/t.eplbt" --slots-per-gpu 6 --ranks-per-node 2 --expert-bytes 256 --json)
for extra in "" "--continuous-in-place --inject-stall 200" "--inject-stall 200"; do
  # shellcheck disable=SC2086
  if mpi4 "${C[@]}" $extra && python3 -c "import json, sys
d = json.load(open('$T/out'))
c = d['continuous']
stalled = '$extra' != ''  # a stalled copy holds the next moves: slower, never unsafe
ok = (d['violations'] == 0 and c is not None and c['moves'] > 0 and c['failed'] == 0
      and d['slots_moved'] == c['moves'] and d['layers_switched'] == 0
      and (c['waits'] > 0 if stalled else
           d['mean_balancedness'] > d['mean_balancedness_first_plan_split'])
      and d['mean_balancedness_first_plan_split'] > d['mean_balancedness_static'])
print('# continuous %.4f, first plan re-split %.4f, static %.4f, %d moves, %d waits' % (
    d['mean_balancedness'], d['mean_balancedness_first_plan_split'],
    d['mean_balancedness_static'], c['moves'], c['waits']))
sys.exit(0 if ok else 1)"; then ok "continuous re-placement ${extra:-staged}: 0 violations, moves (above the kept plan unstalled)"
  else notok "continuous re-placement ${extra:-staged}"; fi
done
if mpi4 "${C[@]}" --continuous 2 --rebalance-every 8; then notok "--continuous with --rebalance-every"
elif [[ $? -eq 2 ]]; then ok "--continuous with --rebalance-every: exit 2"
else notok "--continuous with --rebalance-every: exit code"; fi
for bad in "--plan-steps 0:32" "--plan-steps 5:5" "--plan-steps 0:99" "--split-tolerance 2"; do
  # shellcheck disable=SC2086
  "$EPLB" replay --trace "$T/t.eplbt" --slots-per-gpu 6 --ranks-per-node 1 $bad >"$T/out" 2>"$T/err"
  rc=$?
  if [[ $rc -eq 2 ]] && [[ $(wc -l <"$T/err") -eq 1 ]]; then ok "replay $bad: one line, exit 2"
  else notok "replay $bad: exit $rc"; fi
done

# A problem that one rank alone sees (here rank 2's trace path does not
# exist; every rank runs this wrapper, which picks the path by rank): every
# rank agrees and exits 2 promptly, and rank 2 alone reports it.
cat >"$T/rank.sh" <<EOF
#!/bin/sh
t="$T/t.eplbt"
[ "\$OMPI_COMM_WORLD_RANK" = 2 ] && t="$T/missing.eplbt"
"$EPLB" replay --trace "\$t" --slots-per-gpu 6 --ranks-per-node 2
echo \$? >"$T/rc.\$OMPI_COMM_WORLD_RANK"
EOF
chmod +x "$T/rank.sh"
# The limit only tells a hang (rank 2 gone, the others waiting) from an exit:
# four ASan ranks on a loaded 2-core machine took 34 s.
timeout 120 "$MPIRUN" --oversubscribe -np 4 "$T/rank.sh" >"$T/out" 2>"$T/err"
rc=$?
codes=$(cat "$T"/rc.[0-3] 2>/dev/null | tr '\n' ' ')
if [[ $rc -ne 124 && "$codes" == "2 2 2 2 " ]] && [[ $(grep -c "missing.eplbt" "$T/err") -eq 1 ]]
then ok "a trace missing on one rank only: every rank exits 2, one line"
else notok "a trace missing on one rank only: mpirun $rc, ranks' codes '$codes'"; fi

# Bad input is the same on every rank: one rank is enough to check it.
"$EPLB" replay --trace "$T/missing.eplbt" --slots-per-gpu 6 --ranks-per-node 1 >"$T/out" 2>"$T/err"
rc=$?
if [[ $rc -eq 2 ]] && grep -q "missing.eplbt" "$T/err"; then ok "missing trace: exit 2"
else notok "missing trace: exit $rc"; fi

"$EPLB" replay --trace "$T/t.eplbt" --slots-per-gpu 8 --ranks-per-node 1 >"$T/out" 2>"$T/err"
rc=$?
if [[ $rc -eq 2 ]]; then ok "too few slots: exit 2"; else notok "too few slots: exit $rc"; fi

"$EPLB" replay --trace "$T/t.eplbt" >"$T/out" 2>"$T/err"
rc=$?
if [[ $rc -eq 2 ]] && [[ $(wc -l <"$T/err") -eq 1 ]]; then ok "missing options: one line, exit 2"
else notok "missing options: exit $rc"; fi

# bench runtime: a small run of each mode prints its figures; bad sizes exit 2.
for ct in "" --count-thread; do
  if "$EPLB" bench runtime --layers 3 --tokens 64 --repeat 20 --json $ct >"$T/out" 2>"$T/err" &&
    python3 -c "import json, sys; d = json.load(open('$T/out'))
keys = ('record_median_us', 'map_median_us', 'total_median_us', 'interleaved_median_us',
        'step_end_median_us')
sys.exit(0 if all(d[k] > 0 for k in keys) and d['count_thread'] == ('$ct' != '') else 1)"
  then ok "bench runtime ${ct:-inline}: figures"
  else notok "bench runtime ${ct:-inline}: figures"; fi
done
if "$EPLB" bench runtime --split-per-batch --layers 3 --repeat 10 --json >"$T/out" 2>"$T/err" &&
  python3 -c "import json, sys; d = json.load(open('$T/out'))
keys = ('split_table_local_median_us', 'split_table_global_median_us', 'route_split_median_us',
        'split_table_local_p99_us')
sys.exit(0 if all(d[k] > 0 for k in keys) and d['nodes'] == 4 else 1)"
then ok "bench runtime --split-per-batch: figures"
else notok "bench runtime --split-per-batch: figures"; fi
"$EPLB" bench runtime --topk 9 --experts 8 >"$T/out" 2>"$T/err"
rc=$?
if [[ $rc -eq 2 ]] && [[ $(wc -l <"$T/err") -eq 1 ]]; then ok "bench runtime, topk > experts: exit 2"
else notok "bench runtime, topk > experts: exit $rc"; fi

echo "1..$n"
[[ $fails -eq 0 ]]
