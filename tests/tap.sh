# tests/tap.sh — TAP helpers sourced by the shell tests. Sets $T to a private
# temporary directory (removed on exit); `tap_done` prints the plan and exits
# non-zero when a check failed.
T=$(mktemp -d "${TMPDIR:-/tmp}/$(basename "$0" .sh).XXXXXX")
trap 'rm -rf "$T"' EXIT
n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"; }
skip() { n=$((n + 1)); echo "ok $n # SKIP $1"; }
# expect CODE DESC CMD... : runs CMD (stdout to $T/out, stderr to $T/err), checks its status.
expect() {
  local code=$1 desc=$2
  shift 2
  "$@" >"$T/out" 2>"$T/err"
  local rc=$?
  if [[ $rc -eq $code ]]; then ok "$desc"; else
    notok "$desc (exit $rc, want $code)"
    sed 's/^/# /' "$T/err"
  fi
}
# The last command's error message is one line that names $1.
one_line_naming() {
  local what=$1 desc=$2
  if [[ $(wc -l <"$T/err") -eq 1 ]] && grep -q -- "$what" "$T/err"; then ok "$desc"; else
    notok "$desc"
    sed 's/^/# /' "$T/err"
  fi
}
no_file() { if [[ ! -e $1 ]]; then ok "$2"; else notok "$2: $1 exists"; fi; }
tap_done() {
  echo "1..$n"
  exit $((fails > 0))
}
