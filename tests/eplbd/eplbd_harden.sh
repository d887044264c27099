#!/usr/bin/env bash
# TAP: eplbd under hostile conditions (issue 22, part two): a segment
# truncated while it is read, a damaged plan with a huge epoch in --out,
# epochs at the end of their range, directories where publishing puts its
# temporary names, stalled HTTP clients, non-finite metrics, and (rows 11-13)
# the exit codes and messages of bad configs and shapes. Every loop
# here is bounded and all traffic stays on 127.0.0.1.
source "$(dirname "$0")/common.sh"

# A small trace to plan from (4 layers x 32 experts, 100 steps).
"$FEED" trace "$T/small.eplbt" 1000 0.1 4 32
run_once() { "$EPLBD" --trace "$T/small.eplbt" --gpus 4 --listen off --once "$@"; }

# ---- 1. the segment shrinks and regrows while eplbd reads it (SIGBUS before)
"$FEED" flap "$SHM" 5 &
PIDS+=($!)
flapper=$!
wait_for 5 "[[ -e /dev/shm$SHM ]]"
"$EPLBD" --shm "$SHM" --period 0.002 --gpus 4 --listen off --threshold -1 \
  --log-level error 2>"$T/flap.log" &
daemon=$!
PIDS+=($daemon)
wait $flapper
check "the daemon survives 5 s of a segment truncated under it" "kill -0 $daemon"
kill -TERM $daemon
wait $daemon
rc=$?
check "then SIGTERM exits 0 (exit $rc)" "[[ $rc -eq 0 ]]"
check "the truncated segment was logged as a bad source" "grep -q 'source default' $T/flap.log"
check "no crash" "! grep -qi 'sanitizer\\|segmentation\\|bus error' $T/flap.log"

# ---- 2. resume takes the largest epoch from the listing, skips damaged files
mkdir -p "$T/r"
echo '{"format": "eplb-plan", "version": 1, "num_lay' >"$T/r/plan-1000000000.json"
: >"$T/r/plan-01.json"                       # not a plan name: leading zero
: >"$T/r/plan-99999999999999999999999.json" # not a plan name: beyond 64 bits
t0=$(date +%s.%N)
timeout -s KILL 20 "$EPLBD" --trace "$T/small.eplbt" --out "$T/r" --gpus 4 --listen off --once 2>"$T/r.log"
rc=$?
t1=$(date +%s.%N)
secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}')
check "--once beside a damaged plan-1000000000.json exits 0 (exit $rc)" "[[ $rc -eq 0 ]]"
check "... in under 2 s (${secs} s)" "awk -v s=$secs 'BEGIN {exit !(s < 2)}'"
check "... publishes epoch 1000000001" "[[ \$(readlink $T/r/current) == plan-1000000001.json ]]"
check "... and logs the damaged file" "grep -q 'plan-1000000000.json' $T/r.log"
timeout -s KILL 20 "$EPLBD" --trace "$T/small.eplbt" --out "$T/r" --gpus 4 --listen off \
  --once --threshold -1 2>"$T/r.log"
check "a restart resumes from plan-1000000001.json" \
  "grep -q 'current plan-1000000001.json' $T/r.log && [[ -f $T/r/plan-1000000002.json ]]"
# SIGTERM while starting: exits 0 at once (the resume no longer loops per epoch).
# timeout passes the TERM on and KILLs (exit 137) a daemon that ignores it.
timeout -s KILL 5 "$EPLBD" --trace "$T/small.eplbt" --out "$T/r" --gpus 4 --listen off \
  --period 10 2>/dev/null &
pid=$!
PIDS+=($pid)
# Signal as soon as eplbd catches TERM (SigCgt bit 15, set before its trace,
# resume and first plan): a fixed 0.3 s fell before the handler on a loaded
# machine under ASan, where loading alone took longer.
for _ in $(seq 200); do
  child=$(pgrep -P $pid | head -1)
  cgt=$(awk '/^SigCgt/ {print $2}' /proc/${child:-0}/status 2>/dev/null)
  [[ -n $cgt ]] && ((0x$cgt & 0x4000)) && break
  sleep 0.02
done
kill -TERM $pid
wait $pid
rc=$?
check "SIGTERM while starting exits 0 (exit $rc)" "[[ $rc -eq 0 ]]"

# ---- 7. epochs never wrap
MAX=18446744073709551615
"$FEED" shm "$SHM" 50 0 4 16 $MAX &
PIDS+=($!)
wait_for 5 "[[ -e /dev/shm$SHM ]]" && sleep 0.2
"$EPLBD" --shm "$SHM" --out "$T/e" --gpus 4 --listen off --once 2>"$T/e.log"
rc=$?
check "mailbox epoch 2^64-1: --once refuses with exit 2 (exit $rc)" "[[ $rc -eq 2 ]]"
check "... with a log line naming the epoch" "grep -q '$MAX' $T/e.log"
check "... and publishes no epoch 0" "[[ ! -e $T/e/plan-0.json && ! -e $T/e/current ]]"
check "... the mailbox is left as it was" "[[ \$('$FEED' epoch '$SHM') == $MAX ]]"
"$EPLBD" --shm "$SHM" --out "$T/e" --gpus 4 --period 0.02 --listen off --threshold -1 \
  2>"$T/e2.log" &
pid=$!
PIDS+=($pid)
sleep 1
check "a running daemon stays up" "kill -0 $pid"
kill -TERM $pid
wait $pid
rc=$?
check "... exits 0 on SIGTERM (exit $rc)" "[[ $rc -eq 0 ]]"
lines=$(grep -c 'error' "$T/e2.log")
check "... and logs one error, not one every period ($lines lines)" \
  "[[ $lines -eq 1 && ! -e $T/e/plan-0.json ]]"
kill "${PIDS[-2]}"
wait "${PIDS[-2]}" 2>/dev/null
"$FEED" shm "$SHM" 50 0 4 16 $((MAX - 1)) &
PIDS+=($!)
wait_for 5 "[[ -e /dev/shm$SHM ]]" && sleep 0.2
"$EPLBD" --shm "$SHM" --out "$T/e1" --gpus 4 --listen off --once 2>"$T/e.log"
rc=$?
check "mailbox epoch 2^64-2: epoch 2^64-1 is published (exit $rc)" \
  "[[ $rc -eq 0 && \$(readlink $T/e1/current) == plan-$MAX.json ]] &&
   [[ \$('$FEED' epoch '$SHM') == $MAX ]]"
kill "${PIDS[-1]}"
wait "${PIDS[-1]}" 2>/dev/null
run_once --out "$T/e1" --threshold -1 2>"$T/e.log"
rc=$?
check "a restart resumes after plan-$MAX.json and refuses to wrap (exit $rc)" \
  "[[ $rc -eq 2 ]] && grep -q 'resuming after epoch $MAX' $T/e.log && [[ ! -e $T/e1/plan-0.json ]]"

# ---- 8. directories under the temporary names do not stop publishing
mkdir -p "$T/w/.staging-1.json" "$T/w/.staging-2.json/x" "$T/w/.current.tmp/x"
run_once --out "$T/w" 2>"$T/w.log"
rc=$?
check "a directory named .staging-1.json: --once still publishes (exit $rc)" \
  "[[ $rc -eq 0 && \$(readlink $T/w/current) == plan-1.json ]]"
run_once --out "$T/w" --threshold -1 2>"$T/w.log"
rc=$?
check "non-empty .staging-2.json and .current.tmp directories too (exit $rc)" \
  "[[ $rc -eq 0 && \$(readlink $T/w/current) == plan-2.json ]]"
for f in "$T"/w/plan-*.json; do
  "$EPLB" plan eval --plan "$f" --loads "$T/small.eplbt" >/dev/null 2>&1 || bad=$f
done
check "the plans validate" "[[ -z \${bad:-} ]]"
"$FEED" shm "$SHM" 50 0 4 16 &
PIDS+=($!)
wait_for 5 "[[ -e /dev/shm$SHM ]]" && sleep 0.2
# Without --out the plan is validated through a file in TMPDIR, named after
# the daemon's pid: the shell that execs it makes that name a directory.
mkdir -p "$T/tmpdir"
TMPDIR="$T/tmpdir" bash -c 'mkdir -p "$TMPDIR/eplbd-$$-default.json/x"; exec "$@"' eplbd \
  "$EPLBD" --shm "$SHM" --gpus 4 --listen off --once 2>"$T/w.log"
rc=$?
check "a mailbox-only daemon validates through a free name in TMPDIR (exit $rc)" \
  "[[ $rc -eq 0 && \$('$FEED' epoch '$SHM') == 1 ]]"
kill "${PIDS[-1]}"
wait "${PIDS[-1]}" 2>/dev/null

# ---- 3. 32 stalled clients do not lock out /healthz and /metrics
"$FEED" trace "$T/live.eplbt" 20 0 4 32 &
PIDS+=($!)
wait_for 5 "[[ -s $T/live.eplbt ]]"
"$EPLBD" --trace "$T/live.eplbt" --out "$T/live" --gpus 4 --period 0.2 --threshold -1 \
  --listen 127.0.0.1:0 --port-file "$T/port" 2>"$T/http.log" &
pid=$!
PIDS+=($pid)
wait_for 10 "[[ -s $T/port ]]"
port=$(cat "$T/port" 2>/dev/null)
wait_for 10 "[[ -e $T/live/current ]]"
python3 - "${port:-0}" <<'PY' >"$T/slow.out" 2>&1
import socket, sys, threading, time, urllib.request
port = int(sys.argv[1])
stalled, done = [], threading.Event()
for _ in range(32):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    stalled.append(s)
def drip():  # one header byte per client every ~2 s, for at most ~12 s
    for _ in range(6):
        if done.wait(2):
            return
        for s in stalled:
            try:
                s.send(b"a")
            except OSError:
                pass
t = threading.Thread(target=drip)
t.start()
time.sleep(2.5)  # the clients have dripped once: they are alive, not idle
worst, failed = 0.0, []
for path in ("/healthz", "/metrics", "/plan", "/healthz"):
    t0 = time.monotonic()
    try:
        r = urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5)
        r.read()
        if r.status != 200:
            failed.append(path)
    except Exception as e:
        failed.append("%s (%s)" % (path, e))
    worst = max(worst, time.monotonic() - t0)
done.set()
t.join()
for s in stalled:
    s.close()
print("worst %.2f s; failed: %s" % (worst, ", ".join(failed) or "none"))
sys.exit(0 if not failed and worst < 3 else 1)
PY
rc=$?
check "32 stalled clients: /healthz, /metrics, /plan answer within 3 s ($(tail -1 "$T/slow.out"))" \
  "[[ $rc -eq 0 ]]"
check "the daemon still serves afterwards" "http ${port:-0} /healthz >/dev/null"
kill -TERM $pid
wait $pid

# ---- 4. non-finite values are spelt as Prometheus spells them
"$FEED" hostile "$SHM" huge # finite counts whose sums overflow to inf
"$EPLBD" --shm "$SHM" --gpus 4 --period 0.05 --threshold -1 --listen 127.0.0.1:0 \
  --port-file "$T/port2" 2>"$T/huge.log" &
pid=$!
PIDS+=($pid)
wait_for 10 "[[ -s $T/port2 ]]"
port=$(cat "$T/port2" 2>/dev/null)
wait_for 5 "http ${port:-0} /metrics | grep -qi 'nan\\|inf'"
http "${port:-0}" /metrics >"$T/huge.txt"
python3 - "$T/huge.txt" <<'PY' >"$T/huge.out" 2>&1
import re, sys
# Go's ParseFloat, as Prometheus reads samples: NaN, +Inf, -Inf (never "-nan", "inf").
num = r'[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?'
nonfinite = 0
for line in open(sys.argv[1]):
    if line.startswith("#"):
        continue
    value = line.split()[-1]
    assert re.fullmatch(num, value) or value in ("NaN", "+Inf", "-Inf"), line.strip()
    nonfinite += value in ("NaN", "+Inf", "-Inf")
print("non-finite samples: %d" % nonfinite)
PY
rc=$?
check "/metrics spells NaN/+Inf/-Inf ($(tail -1 "$T/huge.out"))" "[[ $rc -eq 0 ]]"
kill -TERM $pid
wait $pid
"$FEED" unlink "$SHM"
# ---- 5. rows 11-13: exit codes and messages of bad configs and shapes
mkdir -p "$T/o5"
run_once --out "$T/o5" --replicas 16 2>"$T/r5.log"
rc=$?
check "replicas < experts (16 < 32) is bad input: exit 2 (exit $rc)" "[[ $rc -eq 2 ]]"
check "... refused from the header, naming the shape" "grep -q '32 experts: 16 replicas are fewer' $T/r5.log"
printf '{"sources": [{"trace": "%s", "out": "%s"}], "replicas": 16, "gpus": 4, "listen": "off"}\n' \
  "$T/small.eplbt" "$T/o5" >"$T/c5.json"
"$EPLBD" --config "$T/c5.json" --once 2>"$T/c5.log"
rc=$?
check "... the same from a config file: exit 2 (exit $rc)" "[[ $rc -eq 2 ]]"
printf '{"sources": [{"trace": "%s"}], "listen": "off"}\n' "$T/small.eplbt" >"$T/c6.json"
"$EPLBD" --config "$T/c6.json" --once 2>"$T/c6.log"
rc=$?
check "a config error names the config file, not eplbd (exit $rc)" \
  "[[ $rc -eq 2 ]] && grep -q '^eplbd: $T/c6.json: sources\\[0\\]' $T/c6.log && ! grep -q 'eplbd: eplbd' $T/c6.log"
printf '{"sources": [{"trace": "%s", "out": "%s", "name": "a\\rb\\nc"}]}\n' "$T/small.eplbt" "$T/o5" \
  >"$T/c7.json"
"$EPLBD" --config "$T/c7.json" --once 2>"$T/c7.log"
check "a name with \\r and \\n: one line, escaped" \
  "[[ \$(wc -l <$T/c7.log) -eq 1 ]] && grep -qF 'a\\rb\\nc' $T/c7.log"
run_once --out "$T/o5" --move-budget 0 2>"$T/m5.log"
rc=$?
check "--move-budget 0 (unlimited, the config default) is accepted (exit $rc)" "[[ $rc -eq 0 ]]"
# A maximum-shape segment the configured plan cannot hold: refused from its
# header at once, without copying 4096 x 4096 counts each period.
"$FEED" shm "$SHM" 2 0 4096 4096 &
PIDS+=($!)
wait_for 20 "[[ -e /dev/shm$SHM ]]"
t0=$(date +%s.%N)
timeout -s KILL 20 "$EPLBD" --shm "$SHM" --gpus 4 --replicas 64 --listen off --once 2>"$T/big.log"
rc=$?
secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}')
check "a 4096 x 4096 segment with 64 replicas: exit 2 in ${secs} s (exit $rc)" \
  "[[ $rc -eq 2 ]] && awk 'BEGIN {exit !($secs < 2)}'"
kill -TERM "${PIDS[-1]}" 2>/dev/null
wait "${PIDS[-1]}" 2>/dev/null
"$FEED" unlink "$SHM" 2>/dev/null
finish
