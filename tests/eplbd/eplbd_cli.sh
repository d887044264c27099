#!/usr/bin/env bash
# TAP: eplbd --once, bad input (flags, config, traces, segments), HTTP,
# staleness, SIGHUP and SIGTERM.
source "$(dirname "$0")/common.sh"

# ---- bad input: exit 2 and one line
expect2() {
  local desc=$1
  shift
  "$@" >"$T/out" 2>"$T/err"
  local rc=$?
  if [[ $rc -eq 2 && $(wc -l <"$T/err") -ge 1 ]]; then ok "$desc"; else
    notok "$desc (exit $rc)"
    sed 's/^/# /' "$T/err"
  fi
}
expect2 "no arguments" "$EPLBD"
expect2 "bad period" "$EPLBD" --trace x --out y --period -1
expect2 "unknown flag" "$EPLBD" --trace x --out y --frobnicate
expect2 "remote listen needs --allow-remote" "$EPLBD" --trace x --out y --listen 0.0.0.0:1
echo '{"sources": [{"trace": "x", "out": "y"}], "perod": 1}' >"$T/c1.json"
expect2 "config with an unknown key" "$EPLBD" --config "$T/c1.json"
grep -q 'unknown key "perod"' "$T/err" && [[ $(wc -l <"$T/err") -eq 1 ]] &&
  ok "the message names the key on one line" || notok "unknown key message: $(cat "$T/err")"
echo '{"sources": [{"trace": "x", "out": "y"}], "period": "fast"}' >"$T/c2.json"
expect2 "config with a bad value" "$EPLBD" --config "$T/c2.json"
echo '{"sources": [{"trace": "x", "out": "y"}], "gpus": 0}' >"$T/c3.json"
expect2 "config with zero GPUs" "$EPLBD" --config "$T/c3.json"
echo '{"sources": [ ' >"$T/c4.json"
expect2 "config that is not JSON" "$EPLBD" --config "$T/c4.json"
echo '{"sources": [{"trace": "x", "shm": "/y", "out": "z"}]}' >"$T/c5.json"
expect2 "a source with a trace and a segment" "$EPLBD" --config "$T/c5.json"
# Issues 18 and 22: bad user input is exit 2 (not 1), and addresses are strict.
echo '{"sources": [{"trace": "x", "out": ""}]}' >"$T/c6.json"
expect2 "an empty out directory" "$EPLBD" --config "$T/c6.json"
echo '{"sources": [{"shm": "/a/b", "out": "z"}]}' >"$T/c7.json"
expect2 "a segment name with a second '/'" "$EPLBD" --config "$T/c7.json"
echo '{"sources": [{"trace": "x", "out": "z", "name": ""}]}' >"$T/c8.json"
expect2 "an empty source name" "$EPLBD" --config "$T/c8.json"
expect2 "a space inside --listen" "$EPLBD" --trace x --out y --listen "127.0.0.1: 80"
expect2 "a sign in the port" "$EPLBD" --trace x --out y --listen "127.0.0.1:+80"

# ---- --once on the bundled ESFT trace
"$EPLB" trace convert --from topk-npy --experts 64 --tokens-per-step 256 \
  "$SAMPLES/esft-dsv2lite/topk_ids.npy" "$T/esft.eplbt" 2>/dev/null
"$EPLBD" --trace "$T/esft.eplbt" --out "$T/plans" --once --gpus 8 2>"$T/err"
check "--once exits 0" "[[ \$? -eq 0 ]]"
check "--once writes plan-1.json and current" \
  "[[ -f $T/plans/plan-1.json && \$(readlink $T/plans/current) == plan-1.json ]]"
check "the plan validates (eplb plan eval)" \
  "'$EPLB' plan eval --plan '$T/plans/current' --loads '$T/esft.eplbt' >/dev/null 2>&1"
"$EPLBD" --trace "$T/esft.eplbt" --out "$T/plans" --once --gpus 8 --threshold -1 2>"$T/err"
check "a second --once resumes at epoch 2 (incremental from plan-1)" \
  "[[ -f $T/plans/plan-2.json && \$(readlink $T/plans/current) == plan-2.json ]]"
"$EPLBD" --trace "$T/esft.eplbt" --out "$T/plans" --once --gpus 8 --threshold 0.5 2>"$T/err"
check "below the threshold nothing is published" "[[ ! -e $T/plans/plan-3.json ]]"

# ---- garbage traces: exit 2 with a log line, never a crash
head -c 5000 /dev/urandom >"$T/garbage.eplbt"
expect2 "a random file as trace" "$EPLBD" --trace "$T/garbage.eplbt" --out "$T/g" --once
grep -q "source default" "$T/err" && ok "the log line names the source" || notok "garbage log"
cp "$T/esft.eplbt" "$T/bad.eplbt"
size=$(stat -c %s "$T/bad.eplbt")
printf '\xde\xad\xbe\xef' | dd of="$T/bad.eplbt" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
"$EPLBD" --trace "$T/bad.eplbt" --out "$T/g" --once >/dev/null 2>"$T/err"
rc=$?
check "a trace damaged in the middle: exit 1 or 2, no crash (exit $rc)" "[[ $rc -eq 1 || $rc -eq 2 ]]"
check "no plan from garbage" "[[ ! -e $T/g/plan-1.json ]]"

# ---- hostile segments
for kind in magic version size shape seq short; do
  "$FEED" hostile "$SHM" $kind
  "$EPLBD" --shm "$SHM" --out "$T/h" --once >/dev/null 2>"$T/err"
  rc=$?
  if [[ ($rc -eq 1 || $rc -eq 2) && -s "$T/err" ]]; then ok "hostile segment ($kind): exit $rc + log"; else
    notok "hostile segment ($kind): exit $rc"
    sed 's/^/# /' "$T/err"
  fi
  "$FEED" unlink "$SHM"
done
check "no plan from hostile segments" "[[ ! -e $T/h/plan-1.json ]]"

# ---- a live segment: plan into the directory and the mailbox
"$FEED" shm "$SHM" 50 0 6 32 &
PIDS+=($!)
wait_for 5 "[[ -e /dev/shm$SHM ]]" && sleep 0.2
"$EPLBD" --shm "$SHM" --out "$T/s" --once --gpus 4 2>"$T/err"
check "--once from a segment exits 0" "[[ \$? -eq 0 ]]"
check "the mailbox holds epoch 1" "[[ \$('$FEED' mailbox '$SHM') == 1 ]]"
check "the directory holds plan-1.json" "[[ -f $T/s/plan-1.json ]]"
"$EPLBD" --shm "$SHM" --once --gpus 4 2>"$T/err"
check "a restart without --out posts after the mailbox's epoch" \
  "[[ \$('$FEED' mailbox '$SHM') == 2 ]]"
kill "${PIDS[-1]}"

# ---- the running daemon: HTTP, staleness, SIGHUP, SIGTERM
"$FEED" trace "$T/live.eplbt" 20 0 4 32 &
feeder=$!
PIDS+=($feeder)
wait_for 5 "[[ -s $T/live.eplbt ]]"
cat >"$T/run.json" <<JSON
{"sources": [{"name": "live", "trace": "$T/live.eplbt", "out": "$T/live"}],
 "period": 0.1, "stale_after": 1, "threshold": -1, "gpus": 4, "window": 16,
 "listen": "127.0.0.1:0", "port_file": "$T/port"}
JSON
"$EPLBD" --config "$T/run.json" 2>"$T/daemon.log" &
daemon=$!
PIDS+=($daemon)
wait_for 10 "[[ -s $T/port ]]"
port=$(cat "$T/port" 2>/dev/null)
check "the daemon reports its port" "[[ -n '$port' ]]"
check "/healthz is 200" "http $port /healthz >/dev/null"
wait_for 10 "[[ -e $T/live/current ]]"
http "$port" /metrics >"$T/metrics.txt"
python3 - "$T/metrics.txt" <<'PY' && ok "/metrics parses as Prometheus text" || notok "/metrics format"
import re, sys
typed, helped, samples = set(), set(), 0
name = r'[a-zA-Z_:][a-zA-Z0-9_:]*'
for line in open(sys.argv[1]):
    line = line.rstrip("\n")
    m = re.fullmatch(r'# (HELP|TYPE) (%s) (.*)' % name, line)
    if m:
        (helped if m[1] == "HELP" else typed).add(m[2])
        assert m[1] == "HELP" or m[3] in ("counter", "gauge"), line
        continue
    m = re.fullmatch(r'(%s)(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"(,[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*")*\})? (\S+)' % name, line)
    assert m, line
    float(m[4])
    assert m[1] in typed and m[1] in helped, line
    samples += 1
assert samples > 10
PY
check "/metrics has per-layer balancedness" "grep -q 'eplbd_layer_balancedness{source=\"live\",layer=\"3\"}' $T/metrics.txt"
http "$port" /plan >"$T/plan.json"
check "/plan returns the current plan" \
  "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d[\"format\"]==\"eplb-plan\" and d[\"num_gpus\"]==4' $T/plan.json"
check "the daemon publishes while the trace grows" "wait_for 5 '[[ \$(metric $port eplbd_publishes_total) -ge 3 ]]'"
check "not stale while updating" "[[ \$(metric $port eplbd_source_stale) == 0 ]]"
kill -STOP $feeder
check "stale after the source stops" "wait_for 5 '[[ \$(metric $port eplbd_source_stale) == 1 ]]'"
r1=$(metric "$port" eplbd_replans_total)
sleep 1
r2=$(metric "$port" eplbd_replans_total)
check "no replans while stale ($r1 -> $r2)" "[[ '$r1' == '$r2' ]]"
check "the log says stale" "grep -q 'stale' $T/daemon.log"
kill -CONT $feeder
check "resumes when the source updates" "wait_for 5 '[[ \$(metric $port eplbd_source_stale) == 0 ]]'"
check "replans resume" "wait_for 5 '[[ \$(metric $port eplbd_replans_total) -gt $r2 ]]'"
echo '{"sources": [], "period": "x"}' >"$T/run.json"
kill -HUP $daemon
check "a bad config on SIGHUP is logged and kept" "wait_for 5 'grep -q \"keeping the running config\" $T/daemon.log'"
check "still serving after the bad reload" "http $port /healthz >/dev/null"
cat >"$T/run.json" <<JSON
{"sources": [{"name": "live", "trace": "$T/live.eplbt", "out": "$T/live"}],
 "period": 0.2, "stale_after": 1, "threshold": -1, "gpus": 4, "window": 16,
 "listen": "127.0.0.1:0"}
JSON
kill -HUP $daemon
check "a good config on SIGHUP reloads" "wait_for 5 'grep -q \"config reloaded\" $T/daemon.log'"
e1=$(readlink "$T/live/current")
check "publishing continues after reload" "wait_for 5 '[[ \$(readlink $T/live/current) != $e1 ]]'"
kill -TERM $daemon
wait $daemon
check "SIGTERM exits 0" "[[ \$? -eq 0 ]]"
for f in "$T"/live/plan-*.json; do
  "$EPLB" plan eval --plan "$f" --loads "$T/live.eplbt" >/dev/null 2>&1 || bad=$f
done
check "every published plan validates" "[[ -z \${bad:-} ]]"
finish
