#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test twice: a plain build
# with warnings as errors, and an AddressSanitizer + UBSan build. Ends with
# one line "N passed, N failed" (each check test case and each plain test
# counts once per pass).
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh || exit 1
# The real vLLM and SGLang packages for test_real_stacks.py (into build/,
# which the plain pass uses; Python tests do not run under sanitizers).
# Installed, their tests must run; offline, they skip (one line says so).
if scripts/real_stacks.sh build/real-stacks; then
  export EPLB_REAL_STACKS_REQUIRED=1
fi

status=0
run_pass() { # dir, meson options...
  local dir=$1
  shift
  if ! scripts/build.sh "$dir" "$@"; then
    echo "eplb: build in $dir failed" >&2
    return 1
  fi
  local rc=0
  meson test -C "$dir" --print-errorlogs --num-processes 2 >&2 || rc=1
  # A test that took over a third of its timeout would fail on a busier
  # machine: say so (not a failure: the figures are this machine's).
  python3 scripts/check_timeouts.py --durations "$dir" >&2 ||
    echo "eplb: warning: tests near their timeouts in $dir (above)" >&2
  return $rc
}

run_pass build || status=1
# LeakSanitizer: hwloc's pci plugin leaks by design (NOTES.md); tests set
# HWLOC_PLUGINS_BLACKLIST. halt_on_error makes UBSan findings fail the test.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
run_pass build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug || status=1

python3 scripts/count_tests.py build/meson-logs/testlog.json build-asan/meson-logs/testlog.json
rc=$?
[[ $rc -ne 0 ]] && status=1
exit $status
