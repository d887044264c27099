# Shared by the eplbd TAP scripts: args EPLBD FEED EPLB SAMPLES.
set -u
EPLBD=$1
FEED=$2
EPLB=$3
SAMPLES=$4
T=$(mktemp -d "${TMPDIR:-/tmp}/eplbd.XXXXXX")
SHM="/eplbd-test-$$"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  "$FEED" unlink "$SHM" 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"; }
check() { if eval "$2"; then ok "$1"; else notok "$1"; fi; }
finish() { echo "1..$n"; [[ $fails -eq 0 ]]; }
# http PORT PATH -> body on stdout, exit 1 unless status 200
http() {
  python3 - "$1" "$2" <<'PY'
import sys, urllib.request
try:
    r = urllib.request.urlopen("http://127.0.0.1:%s%s" % (sys.argv[1], sys.argv[2]), timeout=5)
    sys.stdout.write(r.read().decode()); sys.exit(0 if r.status == 200 else 1)
except Exception as e:
    sys.stderr.write(str(e) + "\n"); sys.exit(1)
PY
}
# metric PORT NAME -> value of the (first) sample NAME{...}
metric() { http "$1" /metrics | awk -v m="$2" '$1 ~ "^"m"({|$)" {print $2; exit}'; }
# wait_for SECONDS CMD: polls CMD every 0.1 s
wait_for() {
  local end=$((SECONDS + $1))
  shift
  while ((SECONDS <= end)); do
    eval "$1" && return 0
    sleep 0.1
  done
  return 1
}
