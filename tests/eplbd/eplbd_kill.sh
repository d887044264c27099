#!/usr/bin/env bash
# TAP: SIGKILL at random moments while publishing (>= 50 times). After every
# kill the directory holds only complete plans that validate, `current`
# points to one, and the restart resumes from the last published epoch
# (epochs are exactly 1..max: none reused, none skipped).
source "$(dirname "$0")/common.sh"
KILLS=${EPLBD_KILLS:-55}

"$FEED" trace "$T/grow.eplbt" 50 0 4 32 &
PIDS+=($!)
wait_for 5 "[[ -s $T/grow.eplbt ]]"
# A kill can land before the first plan (or the directory) exists: without
# nullglob the loop below would see the literal pattern and count it as a
# stray file.
shopt -s nullglob
# scan DIR: sets max (largest plan epoch) and appends visible leftovers to stray.
scan() {
  local f b
  max=0
  for f in "$1"/*; do
    b=$(basename "$f")
    if [[ $b =~ ^plan-([0-9]+)\.json$ ]]; then
      ((BASH_REMATCH[1] > max)) && max=${BASH_REMATCH[1]}
    elif [[ $b != current ]]; then
      stray+=" $b" # visible leftovers are failures; hidden staging files are allowed
    fi
  done
}
# The scan itself: an empty or missing directory is clean, a visible leftover is not.
mkdir -p "$T/self"
stray=""
scan "$T/self"
scan "$T/missing"
check "scan: an empty or missing directory has no stray file" "[[ -z '$stray' && $max -eq 0 ]]"
touch "$T/self/plan-3.json" "$T/self/.staging-4.json" "$T/self/plan-4.json.tmp"
scan "$T/self"
check "scan: a visible leftover is a stray file, a hidden one is not" \
  "[[ '$stray' == ' plan-4.json.tmp' && $max -eq 3 ]]"
checked=0 # plans validated so far (epochs 1..checked)
bad=""
stray=""
gaps=""
dangling=0
published=0
# A loaded machine (or ASan) can take longer to start the daemon than any
# fixed delay: each round waits (up to 30 s) until the daemon has published
# a new plan, then kills it at a random moment of its next periods (the
# period is 50 ms), so every kill lands while it publishes.
for ((kills = 1; kills <= KILLS; kills++)); do
  before=$(readlink "$T/d/current" 2>/dev/null)
  # Every plan is kept (--keep-plans 0): the checks below need each epoch's file.
  "$EPLBD" --trace "$T/grow.eplbt" --out "$T/d" --period 0.05 --threshold -1 --gpus 4 \
    --window 8 --keep-plans 0 --listen off --log-level error 2>>"$T/log" &
  pid=$!
  wait_for 30 "[[ \$(readlink $T/d/current 2>/dev/null) != '$before' ]]"
  sleep "$(printf "0.%02d" $((RANDOM % 10)))"
  kill -9 $pid
  wait $pid 2>/dev/null
  scan "$T/d"
  for ((e = checked + 1; e <= max; e++)); do
    if [[ ! -f $T/d/plan-$e.json ]]; then gaps+=" $e"; continue; fi
    "$EPLB" plan eval --plan "$T/d/plan-$e.json" --loads "$T/grow.eplbt" >/dev/null 2>&1 || bad+=" $e"
  done
  published=$((published + max - checked))
  checked=$max
  # current may be missing only before the first plan is linked; when it
  # exists it must name a complete plan.
  if [[ -L $T/d/current ]] || ((max > 1)); then
    cur=$(readlink "$T/d/current")
    [[ -n $cur && -f $T/d/$cur ]] || dangling=$((dangling + 1))
  fi
done
check "$KILLS kills, $published plans published" "((published >= KILLS))"
check "every plan-*.json validates" "[[ -z '$bad' ]]" || echo "# invalid:$bad"
check "no partial or stray visible file" "[[ -z '$stray' ]]" || echo "# stray:$stray"
check "epochs are exactly 1..$checked (restarts resume from the last epoch)" "[[ -z '$gaps' ]]"
check "current always points to a plan" "[[ $dangling -eq 0 ]]"
"$EPLBD" --trace "$T/grow.eplbt" --out "$T/d" --once --threshold -1 --gpus 4 --window 8 2>"$T/err"
check "a clean restart publishes epoch $((checked + 1))" \
  "[[ \$(readlink $T/d/current) == plan-$((checked + 1)).json ]]"
check "no crash log (signals other than KILL)" "! grep -qi 'segmentation\\|abort' $T/log"
finish
