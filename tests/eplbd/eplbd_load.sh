#!/usr/bin/env bash
# TAP: load figure (measured and reported, not asserted). One writer process
# publishes a DeepSeek-V3-shaped window (58 layers x 256 experts: what rank 0
# of 64 ranks publishes after the all-reduce) 100 times per second; eplbd
# follows it with a 2 s period (EPLBD_LOAD_PERIOD; default policy: incremental, or
# EPLBD_LOAD_POLICY), planning for 64 GPUs. Reports the daemon's CPU from
# /proc/PID/stat (utime + stime) over the measured interval, and what it did.
source "$(dirname "$0")/common.sh"
SECS=${EPLBD_LOAD_SECONDS:-10}
PERIOD=${EPLBD_LOAD_PERIOD:-2}
POLICY=${EPLBD_LOAD_POLICY:-incremental}
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

"$FEED" shm "$SHM" 100 0 58 256 &
writer=$!
PIDS+=($writer)
wait_for 5 "[[ -e /dev/shm$SHM ]]"
"$EPLBD" --shm "$SHM" --out "$T/plans" --period "$PERIOD" --policy "$POLICY" --gpus 64 --slots-per-gpu 5 \
  --stale-after 5 --listen 127.0.0.1:0 --port-file "$T/port" --log-level warn 2>"$T/log" &
daemon=$!
PIDS+=($daemon)
check "the daemon publishes a first plan" "wait_for 20 '[[ -e $T/plans/current ]]'"
d0=$(ticks $daemon)
w0=$(ticks $writer)
t0=$(date +%s.%N)
sleep "$SECS"
d1=$(ticks $daemon)
w1=$(ticks $writer)
t1=$(date +%s.%N)
port=$(cat "$T/port")
replans=$(metric "$port" eplbd_replans_total)
publishes=$(metric "$port" eplbd_publishes_total)
skipped=$(metric "$port" eplbd_skipped_below_threshold_total)
plan_s=$(metric "$port" eplbd_planning_seconds_last)
cpu=$(awk -v a=$d0 -v b=$d1 -v t0=$t0 -v t1=$t1 -v hz=$hz 'BEGIN {printf "%.1f", 100 * (b - a) / hz / (t1 - t0)}')
wcpu=$(awk -v a=$w0 -v b=$w1 -v t0=$t0 -v t1=$t1 -v hz=$hz 'BEGIN {printf "%.1f", 100 * (b - a) / hz / (t1 - t0)}')
echo "# eplbd CPU ${cpu}% of one core over ${SECS} s, period ${PERIOD} s, policy ${POLICY}" \
  "(writer ${wcpu}%); replans ${replans}, publishes ${publishes}, skipped ${skipped}," \
  "last plan ${plan_s} s"
check "the daemon is alive and replanning" "kill -0 $daemon && (( ${replans:-0} >= 1 ))"
kill -TERM $daemon
wait $daemon
check "SIGTERM exits 0" "[[ \$? -eq 0 ]]"
finish
