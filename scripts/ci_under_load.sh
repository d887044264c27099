#!/usr/bin/env bash
# Runs CI (.ci/run on a fresh clone of this repository's HEAD) N times in a
# row (default 3) with a CPU hog pinned to the second core, as a busy shared
# machine would be, and prints each run's summary line, its wall time and its
# slowest tests. Exits non-zero when any run failed.
#   scripts/ci_under_load.sh [RUNS]
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
src=$(pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/eplb-ci-load.XXXXXX")
cpus=$(nproc)
hog_cpu=$((cpus > 1 ? 1 : 0))
hog=""
stop_hog() { [[ -n $hog ]] && kill "$hog" 2>/dev/null && wait "$hog" 2>/dev/null; hog=""; }
trap 'stop_hog; rm -rf "$work"' EXIT
taskset -c "$hog_cpu" bash -c 'while :; do yes > /dev/null; done' &
hog=$!
echo "ci-load: CPU hog (pid $hog) on core $hog_cpu of $cpus" >&2
status=0
for ((i = 1; i <= runs; i++)); do
  rm -rf "$work/clone"
  git clone -q "$src" "$work/clone"
  start=$SECONDS
  CI=true bash "$work/clone/.ci/run" >"$work/run$i.log" 2>&1
  rc=$?
  secs=$((SECONDS - start))
  ((rc != 0)) && status=1
  echo "run $i: exit $rc, ${secs} s: $(tail -n 1 "$work/run$i.log")"
  python3 - "$work/clone" <<'PY'
import json, sys, os
rows = []
for d in ("build", "build-asan"):
    p = os.path.join(sys.argv[1], d, "meson-logs", "testlog.json")
    if os.path.exists(p):
        for line in open(p):
            r = json.loads(line)
            rows.append((r["duration"], d, r["name"], r["result"], r.get("timeout")))
rows.sort(reverse=True)
for dur, d, name, res, _ in rows[:6]:
    print("  %-10s %-55s %6.1f s  %s" % (d, name, dur, res))
PY
  if ((rc != 0)); then
    cp "$work/run$i.log" "${TMPDIR:-/tmp}/eplb-ci-load-run$i.log"
    echo "  log kept: ${TMPDIR:-/tmp}/eplb-ci-load-run$i.log"
  fi
done
exit $status
