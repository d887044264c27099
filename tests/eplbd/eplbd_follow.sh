#!/usr/bin/env bash
# TAP: following a trace that is truncated, rewritten in place, replaced by
# rename or recreated by a restarted producer (issue 33, N5: the daemon kept
# reading the old file or offset, silently stale), and old plans pruned to
# the last keep_plans (N6: plan-N.json used to pile up, 8 MB in 15 s). ~10 s.
source "$(dirname "$0")/common.sh"

# layers PORT -> num_layers of the plan /plan serves
layers() { http "$1" /plan | python3 -c 'import json, sys; print(json.load(sys.stdin)["num_layers"])'; }
"$FEED" trace "$T/a.eplbt" 1000 0.1 4 32  # ~100 steps
"$FEED" trace "$T/b.eplbt" 1000 0.1 6 32  # another shape, larger than c
"$FEED" trace "$T/c.eplbt" 1000 0.03 4 32 # ~30 steps: a's first steps
"$FEED" trace "$T/d.eplbt" 1000 0.05 5 32
cp "$T/a.eplbt" "$T/live.eplbt"
"$EPLBD" --trace "$T/live.eplbt" --out "$T/o" --gpus 4 --period 0.1 --threshold -1 --window 16 \
  --stale-after 1000 --listen 127.0.0.1:0 --port-file "$T/port" 2>"$T/d.log" &
pid=$!
PIDS+=($pid)
wait_for 10 "[[ -s $T/port && -e $T/o/current ]]"
port=$(cat "$T/port" 2>/dev/null)
port=${port:-0}
p=$(metric $port eplbd_publishes_total)
check "the daemon follows the trace (published ${p:-nothing})" "[[ \${p:-0} -ge 1 ]]"

# ---- truncated in place (same file, fewer steps)
ino=$(stat -c %i "$T/live.eplbt")
truncate -s "$(stat -c %s "$T/c.eplbt")" "$T/live.eplbt"
check "truncated in place: re-read and replanned" \
  "wait_for 5 '[[ \$(metric $port eplbd_publishes_total) -gt $p ]]'"
check "... logged once" "[[ \$(grep -c 'live.eplbt truncated' $T/d.log) -eq 1 && \$(stat -c %i $T/live.eplbt) == $ino ]]"

# ---- rewritten in place with other contents (another shape, a larger file)
python3 -c 'import sys; d = open(sys.argv[1], "rb").read(); f = open(sys.argv[2], "r+b"); f.write(d); f.truncate(len(d))' \
  "$T/b.eplbt" "$T/live.eplbt"
check "rewritten in place: the new contents are followed (6 layers)" \
  "wait_for 5 '[[ \$(layers $port) == 6 ]]'"
check "... logged" "grep -q 'live.eplbt \\(rewritten\\|truncated\\).*reading it again from the start' $T/d.log"

# ---- replaced by rename
cp "$T/d.eplbt" "$T/new.tmp"
mv "$T/new.tmp" "$T/live.eplbt"
check "replaced by rename: the new file is followed (5 layers)" "wait_for 5 '[[ \$(layers $port) == 5 ]]'"
check "... logged in one line" "[[ \$(grep -c 'replaced by another file' $T/d.log) -eq 1 ]]"

# ---- a producer restarted on the same path (a new file, growing)
rm "$T/live.eplbt"
"$FEED" trace "$T/live.eplbt" 20 0 4 32 &
PIDS+=($!)
check "a restarted producer is followed (4 layers)" "wait_for 5 '[[ \$(layers $port) == 4 ]]'"
p=$(metric $port eplbd_publishes_total)
check "... as it grows" "wait_for 5 '[[ \$(metric $port eplbd_publishes_total) -ge $((p + 3)) ]]'"
check "no error logged for any of it" "! grep -q ' error: ' $T/d.log"

# ---- N6: the last 16 plans by default, never the one current points to
wait_for 10 "[[ \$(metric $port eplbd_plan_epoch) -ge 24 ]]"
files=$(ls "$T/o" | grep -c '^plan-')
e=$(metric $port eplbd_plan_epoch)
check "a running daemon keeps the last 16 plans ($files files at epoch $e)" \
  "[[ \${e:-0} -ge 24 && $files -le 17 && -f $T/o/\$(readlink $T/o/current) ]]"
kill -TERM $pid
wait $pid
"$EPLBD" --trace "$T/a.eplbt" --out "$T/seed" --gpus 4 --listen off --once 2>/dev/null
mkdir -p "$T/k"
for i in $(seq 1 40); do cp "$T/seed/plan-1.json" "$T/k/plan-$i.json"; done
"$EPLBD" --trace "$T/a.eplbt" --out "$T/k" --gpus 4 --listen off --once --threshold -1 2>"$T/k.log"
rc=$?
names=$(cd "$T/k" && ls plan-*.json | sed 's/plan-\([0-9]*\).json/\1/' | sort -n | tr '\n' ' ')
check "40 old plans, one more published: plans 26-41 are left (exit $rc)" \
  "[[ $rc -eq 0 && '$names' == '$(seq 26 41 | tr '\n' ' ')' ]]"
# Plans 5-10 are damaged: resume takes plan-4 as current; nothing is published
# (the threshold is out of reach), and plan-4 stays with the newest 2.
mkdir -p "$T/c"
for i in $(seq 1 10); do cp "$T/seed/plan-1.json" "$T/c/plan-$i.json"; done
for i in $(seq 5 10); do echo '{"format": "eplb-plan", "ver' >"$T/c/plan-$i.json"; done
"$EPLBD" --trace "$T/a.eplbt" --out "$T/c" --gpus 4 --listen off --once --threshold 1 \
  --keep-plans 2 2>"$T/c.log"
rc=$?
names=$(cd "$T/c" && ls plan-*.json | sort -V | tr '\n' ' ')
check "--keep-plans 2 never removes the plan current points to (exit $rc; $names)" \
  "[[ $rc -eq 0 && \$(readlink $T/c/current) == plan-4.json && '$names' == 'plan-4.json plan-9.json plan-10.json ' ]]"
"$EPLBD" --trace "$T/a.eplbt" --out "$T/c" --gpus 4 --listen off --once --threshold -1 \
  --keep-plans 0 2>"$T/c.log"
check "--keep-plans 0 keeps every plan" "[[ -f $T/c/plan-4.json && -f $T/c/plan-9.json && -f $T/c/plan-11.json ]]"
grep "reading it again" "$T/d.log" | sed "s/^/# /"
finish
