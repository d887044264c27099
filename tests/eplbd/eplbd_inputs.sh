#!/usr/bin/env bash
# TAP: what eplbd refuses at load, exit 2 with one line (issue 33): sources
# publishing into overlapping directories (N2), unusable outputs, fractional
# windows, publish_shm on a trace, a port file in a missing directory and
# --once on a missing trace (N9), a config file that is not a regular file,
# at start and on SIGHUP (F13), and a segment whose mailbox cannot hold the
# plan (N7). Every daemon run here is bounded by timeout.
source "$(dirname "$0")/common.sh"

"$FEED" trace "$T/small.eplbt" 1000 0.1 4 32
# refused DESC PATTERN CMD...: exit 2 within 5 s, one line on stderr that matches PATTERN.
refused() {
  local desc=$1 pat=$2
  shift 2
  timeout -s KILL 5 "$@" >"$T/out" 2>"$T/err"
  local rc=$? lines
  lines=$(wc -l <"$T/err")
  if [[ $rc -eq 2 && $lines -eq 1 ]] && grep -q -- "$pat" "$T/err"; then ok "$desc"; else
    notok "$desc (exit $rc, $lines lines)"
    head -3 "$T/err" | sed 's/^/# /'
  fi
}
# config FILE SOURCES [TOP-LEVEL KEYS]: a config with these sources (JSON objects).
config() { printf '{"sources": [%s], "gpus": 4, "listen": ""%s}\n' "$2" "${3:-}" >"$1"; }
src() { printf '{"name": "%s", "trace": "%s", "out": "%s"%s}' "$1" "$T/small.eplbt" "$2" "${3:-}"; }

# ---- N2: each source needs an output directory of its own
mkdir -p "$T/p"
ln -s "$T/p" "$T/link"
config "$T/n2a.json" "$(src a "$T/p"), $(src b "$T/p")"
refused "two sources with the same out: refused, naming both" 'sources "a" and "b" publish into overlapping' \
  "$EPLBD" --config "$T/n2a.json" --once
config "$T/n2b.json" "$(src a "$T/p"), $(src b "$T/p/sub")"
refused "one out inside the other" 'sources "a" and "b"' "$EPLBD" --config "$T/n2b.json" --once
config "$T/n2c.json" "$(src a "$T/link/"), $(src b "$T/q/../p/.")"
refused "the same directory through a symlink and ../." 'sources "a" and "b"' \
  "$EPLBD" --config "$T/n2c.json" --once
config "$T/n2d.json" "$(src a "$T/p1"), $(src b "$T/p10")"
"$EPLBD" --config "$T/n2d.json" --once 2>"$T/err"
rc=$?
check "sibling directories p1 and p10 are fine (exit $rc)" \
  "[[ $rc -eq 0 && -f $T/p1/plan-1.json && -f $T/p10/plan-1.json ]]"
check "nothing was published by the refused configs" "[[ ! -e $T/p/current ]]"

# ---- N9: outputs, windows, flags that cannot work
# Without --once and with a missing trace, so that a daemon that accepts
# "/" plans nothing there (it would run until the timeout).
printf '{"sources": [{"trace": "%s/none.eplbt", "out": "/"}], "listen": ""}\n' "$T" >"$T/root.json"
refused '"out": "/" is refused' 'is a system directory' "$EPLBD" --config "$T/root.json"
refused "--out /usr (a system directory)" 'is a system directory' \
  "$EPLBD" --trace "$T/none.eplbt" --out /usr/ --listen off
refused "--once --out a regular file" 'not a directory' \
  "$EPLBD" --trace "$T/small.eplbt" --out "$T/small.eplbt" --gpus 4 --listen off --once
refused "--once --out in a missing directory" 'missing, and its parent' \
  "$EPLBD" --trace "$T/small.eplbt" --out "$T/no/such/dir" --gpus 4 --listen off --once
config "$T/w1.json" "$(src a "$T/w")" ', "window": 64.5'
refused 'a fractional "window"' '"window": expected an integer' "$EPLBD" --config "$T/w1.json" --once
config "$T/w2.json" "$(src a "$T/w" ', "window": 2.5')"
refused 'a fractional "window" of a source' '"window": expected an integer' \
  "$EPLBD" --config "$T/w2.json" --once
config "$T/ps.json" "$(src a "$T/w" ', "publish_shm": true')"
refused '"publish_shm" on a trace source' '"publish_shm" needs a "shm" source' \
  "$EPLBD" --config "$T/ps.json" --once
refused "a port file in a missing directory" 'port_file' \
  "$EPLBD" --trace "$T/small.eplbt" --out "$T/w" --gpus 4 --port-file "$T/nodir/port" --once
refused "--once on a missing trace: exit 2, not 1" 'none.eplbt": No such file' \
  "$EPLBD" --trace "$T/none.eplbt" --out "$T/w" --gpus 4 --listen off --once
check "... and nothing written" "[[ ! -e $T/w/current ]]"
"$EPLBD" --trace "$T/small.eplbt" --out "$T/fresh" --gpus 4 --listen off --once 2>"$T/err"
rc=$?
check "an out directory to create in a writable parent is fine (exit $rc)" \
  "[[ $rc -eq 0 && -f $T/fresh/plan-1.json ]]"

# ---- F13: the config must be a regular file (a FIFO used to block for ever)
mkfifo "$T/fifo.json"
refused "--config FIFO --once: exit 2 at once" 'not a regular file' \
  "$EPLBD" --config "$T/fifo.json" --once
refused "--config a directory" 'not a regular file' "$EPLBD" --config "$T" --once
"$FEED" trace "$T/live.eplbt" 20 0 4 32 &
PIDS+=($!)
wait_for 5 "[[ -s $T/live.eplbt ]]"
cat >"$T/run.json" <<JSON
{"sources": [{"name": "live", "trace": "$T/live.eplbt", "out": "$T/live"}],
 "period": 0.1, "threshold": -1, "gpus": 4, "window": 16,
 "listen": "127.0.0.1:0", "port_file": "$T/port"}
JSON
"$EPLBD" --config "$T/run.json" 2>"$T/daemon.log" &
daemon=$!
PIDS+=($daemon)
wait_for 10 "[[ -s $T/port && -e $T/live/current ]]"
port=$(cat "$T/port" 2>/dev/null)
rm -f "$T/run.json"
mkfifo "$T/run.json"
kill -HUP $daemon
check "SIGHUP with the config now a FIFO: logged, the running config kept" \
  "wait_for 5 'grep -q \"not a regular file: keeping the running config\" $T/daemon.log'"
e1=$(readlink "$T/live/current")
check "publishing goes on after that reload ($e1 -> ...)" \
  "wait_for 5 '[[ \$(readlink $T/live/current) != $e1 ]]'"
check "/healthz still answers" "http ${port:-0} /healthz >/dev/null"
kill -TERM $daemon
wait $daemon
rc=$?
check "SIGTERM exits 0 (exit $rc)" "[[ $rc -eq 0 ]]"

# ---- N7: a mailbox too small for the plan is refused from the segment header
# 4 layers x 32 experts on 4 GPUs: 36 slots, a plan block of 1,768 bytes.
"$FEED" shm "$SHM" 50 0 4 32 0 1024 &
PIDS+=($!)
wait_for 5 "[[ -e /dev/shm$SHM ]]" && sleep 0.2
timeout -s KILL 10 "$EPLBD" --shm "$SHM" --out "$T/m" --gpus 4 --listen off --once 2>"$T/m.log"
rc=$?
check "--once with --out: exit 2 (exit $rc)" "[[ $rc -eq 2 ]]"
check "... one line naming the mailbox and the plan's size" \
  "[[ \$(wc -l <$T/m.log) -eq 1 ]] && grep -q 'mailbox of 1024 bytes cannot hold a plan of 4 layers x 36 slots on 4 GPUs (1768 bytes)' $T/m.log"
check "... and nothing published" "[[ ! -e $T/m/plan-1.json ]]"
timeout -s KILL 10 "$EPLBD" --shm "$SHM" --gpus 4 --listen off --once 2>"$T/m.log"
rc=$?
check "--once without --out: exit 2 too (exit $rc)" "[[ $rc -eq 2 ]]"
"$EPLBD" --shm "$SHM" --out "$T/m2" --gpus 4 --period 0.05 --threshold -1 --listen off 2>"$T/m2.log" &
pid=$!
PIDS+=($pid)
sleep 1
kill -TERM $pid
wait $pid
lines=$(grep -c 'error' "$T/m2.log")
check "a running daemon logs it once and plans nothing ($lines error lines)" \
  "[[ $lines -eq 1 && ! -e $T/m2/plan-1.json ]] && ! grep -q 'published' $T/m2.log"
printf '{"sources": [{"shm": "%s", "out": "%s", "publish_shm": false}], "gpus": 4, "listen": ""}\n' \
  "$SHM" "$T/m3" >"$T/m3.json"
"$EPLBD" --config "$T/m3.json" --once 2>"$T/m3.log"
rc=$?
check "with \"publish_shm\": false the directory gets the plan (exit $rc)" \
  "[[ $rc -eq 0 && -f $T/m3/plan-1.json ]]"
finish
