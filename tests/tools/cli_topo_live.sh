#!/usr/bin/env bash
# TAP test of `eplb topo show` on the live machine (hwloc), the error and the
# success path, with hwloc's PCI plugin enabled: under ASan no leak may be
# reported (hwloc's own are suppressed by lsan-hwloc.supp, which says why).
# usage: cli_topo_live.sh EPLB SUPPRESSIONS
set -u
EPLB=$1
SUPP=$2
. "$(dirname "$0")/../tap.sh"
unset HWLOC_PLUGINS_BLACKLIST
export LSAN_OPTIONS="suppressions=$SUPP:print_suppressions=0"
# The plugin has no frame pointers: the slow unwinder reaches libhwloc.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
no_leak() {
  if grep -q "Sanitizer" "$T/err"; then notok "$1"; sed 's/^/# /' "$T/err" | head -40; else ok "$1"; fi
}

# The live machine: exit 0 when it has GPUs, else exit 2 with one line.
timeout 60 "$EPLB" topo show >"$T/out" 2>"$T/err"
rc=$?
if [[ $rc -eq 0 ]] || { [[ $rc -eq 2 ]] && [[ $(wc -l <"$T/err") -eq 1 ]] &&
  grep -q "no GPU" "$T/err"; }; then ok "topo show (live): exit $rc"; else
  notok "topo show (live): exit $rc"
  sed 's/^/# /' "$T/err" | head -40
fi
no_leak "topo show (live): no leak reported"
expect 2 "topo show --cluster of a missing file" timeout 60 "$EPLB" topo show \
  --cluster "$T/none.json"
no_leak "missing cluster file: no leak reported"
echo '{"format": "eplb-cluster", "version": 1,
  "nodes": [{"name": "me", "gpus": 2, "live": true}]}' >"$T/live.json"
expect 0 "topo show --cluster FILE (live node, 2 GPUs)" timeout 60 "$EPLB" topo show \
  --cluster "$T/live.json"
no_leak "live node: no leak reported"
expect 0 "topo show --cluster FILE --json" timeout 60 "$EPLB" topo show --cluster "$T/live.json" \
  --json
no_leak "live node --json: no leak reported"
echo '{"format": "eplb-cluster", "version": 1,
  "nodes": [{"name": "me", "gpus": 2, "live": true, "slots_per_gpu": 0}]}' >"$T/bad.json"
expect 2 "live node with a bad field" timeout 60 "$EPLB" topo show --cluster "$T/bad.json"
no_leak "live node, bad field: no leak reported"
tap_done
