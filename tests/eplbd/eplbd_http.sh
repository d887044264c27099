#!/usr/bin/env bash
# TAP: stalled HTTP clients never lock out /healthz and /metrics (issue 33,
# F3): 64 stalled clients from 127.0.0.1 used to fill the per-address limit,
# and 512 from 127.0.0.2-.9 the whole server (0 of 50 requests answered).
# All traffic stays on loopback; ~10 s.
source "$(dirname "$0")/common.sh"
CLIENTS="$(dirname "$0")/slow_clients.py"

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

spread=127.0.0.2,127.0.0.3,127.0.0.4,127.0.0.5,127.0.0.6,127.0.0.7,127.0.0.8,127.0.0.9
python3 "$CLIENTS" "${port:-0}" "$spread" 512 50 >"$T/a.out" 2>&1
rc=$?
check "512 stalled clients over 127.0.0.2-.9: /healthz and /metrics answered ($(tail -1 "$T/a.out"))" \
  "[[ $rc -eq 0 ]]"
python3 "$CLIENTS" "${port:-0}" 127.0.0.1 512 50 >"$T/b.out" 2>&1
rc=$?
check "512 stalled clients from 127.0.0.1 itself: answered ($(tail -1 "$T/b.out"))" "[[ $rc -eq 0 ]]"
python3 "$CLIENTS" "${port:-0}" "127.0.0.1,$spread" 512 50 >"$T/c.out" 2>&1
rc=$?
check "512 stalled clients from all nine: answered ($(tail -1 "$T/c.out"))" "[[ $rc -eq 0 ]]"
closed=$(metric "${port:-0}" eplbd_http_closed_to_make_room_total)
check "the stalled connections closed to make room are counted ($closed)" "(( ${closed:-0} > 0 ))"
check "the daemon kept publishing" "http ${port:-0} /plan >/dev/null && kill -0 $pid"
kill -TERM $pid
wait $pid
rc=$?
check "SIGTERM exits 0 (exit $rc)" "[[ $rc -eq 0 ]]"
check "no crash" "! grep -qi 'sanitizer\\|segmentation\\|abort\\|fatal' $T/http.log"
finish
