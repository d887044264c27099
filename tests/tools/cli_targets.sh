#!/usr/bin/env bash
# TAP test of output targets that are not regular files (issue 33, N1): every
# writer refuses, at once and with one line (exit 2), a target that is a FIFO,
# a device node or a link to one, and leaves it as it was; it never opens it
# (a FIFO would block). A regular file, or a link to one, is replaced as ever.
# The device is a private node made in the test's directory (root only: the
# part is skipped elsewhere); the system's /dev/null is never named.
# usage: cli_targets.sh EPLB
set -u
EPLB=$1
. "$(dirname "$0")/../tap.sh"
fast() { timeout 10 "$@"; }
check() { if eval "$2"; then ok "$1"; else notok "$1"; fi; }

"$EPLB" trace gen --layers 2 --experts 8 --topk 2 --steps 4 --tokens-per-step 64 --seed 1 \
  -o "$T/t.eplbt" >/dev/null 2>&1 || { echo "Bail out! trace gen failed"; exit 1; }
"$EPLB" plan --loads "$T/t.eplbt" --gpus 2 --replicas 8 -o "$T/p.json" >/dev/null 2>&1 ||
  { echo "Bail out! plan failed"; exit 1; }
printf '1,2,3,4,5,6,7,8\n8,7,6,5,4,3,2,1\n' >"$T/l.csv"

# Every writer of the CLI, its output last ("TARGET" is replaced).
writers=(
  "plan|plan --loads $T/t.eplbt --gpus 2 --replicas 8 -o TARGET"
  "split|split --plan $T/p.json --loads $T/l.csv -o TARGET"
  "trace convert|trace convert $T/l.csv TARGET"
  "trace gen|trace gen --layers 2 --experts 8 --topk 2 --steps 2 --tokens-per-step 16 -o TARGET"
  "trace recover|trace recover $T/t.eplbt TARGET"
  "sim --csv|sim --trace $T/t.eplbt --cluster 1x2 --policy balanced --slots-per-gpu 4 --csv TARGET"
  "sim --plot|sim --trace $T/t.eplbt --cluster 1x2 --policy balanced --slots-per-gpu 4 --plot TARGET"
)

mkfifo "$T/fifo" || { echo "Bail out! mkfifo failed"; exit 1; }
ln -s "$T/fifo" "$T/fifo-link"
kinds=("fifo|-p|FIFO" "fifo-link|-p|link to a FIFO")
if mknod -m 666 "$T/dev" c 1 3 2>/dev/null; then
  kinds+=("dev|-c|device node")
else
  skip "mknod: not permitted here (device node targets)"
fi

for k in "${kinds[@]}"; do
  IFS='|' read -r name test what <<<"$k"
  for w in "${writers[@]}"; do
    IFS='|' read -r cmd args <<<"$w"
    # shellcheck disable=SC2086
    expect 2 "$cmd: -o a $what is refused" fast "$EPLB" ${args/TARGET/$T/$name}
    if [[ $(wc -l <"$T/err") -eq 1 ]] && grep -q "not a regular file" "$T/err"; then
      ok "... one line: not a regular file"
    else
      notok "... one line: not a regular file"
      sed 's/^/# /' "$T/err"
    fi
    check "... the $what is left as it was" "[[ $test $T/$name ]]"
  done
done

# plan --export into a directory where an export file is a FIFO: refused at
# the commit, and neither the plan nor any export file is written.
mkdir "$T/exp"
mkfifo "$T/exp/logcnt.csv"
expect 2 "plan --export: a FIFO among the export files is refused" fast "$EPLB" plan \
  --loads "$T/t.eplbt" --gpus 2 --replicas 8 --export deepseek-csv "$T/exp" -o "$T/pe.json"
check "... the FIFO is left as it was" "[[ -p $T/exp/logcnt.csv ]]"
no_file "$T/pe.json" "... and no plan is written"

# A regular file and a link to one are still replaced.
echo old >"$T/reg.json"
ln -s "$T/reg.json" "$T/reg-link.json"
expect 0 "plan -o a regular file" "$EPLB" plan --loads "$T/t.eplbt" --gpus 2 --replicas 8 \
  -o "$T/reg.json"
check "... now a plan" "grep -q eplb-plan $T/reg.json"
expect 0 "plan -o a link to a regular file" "$EPLB" plan --loads "$T/t.eplbt" --gpus 2 \
  --replicas 8 -o "$T/reg-link.json"
check "... now a plan" "grep -q eplb-plan $T/reg-link.json"

tap_done
