#!/bin/sh
# peer_death.sh COURIER_RUN PEER_DEATH_CHECK TIMEOUT_S [TRAFFIC [HOW]]
#
# TRAFFIC: writes (default) or ep (EP dispatch and combine over the proxy path).
# HOW: kill (default) or kill-locked (rank 2 holds its libfabric shm region's
# lock when it dies, so the survivors' posts to it never return: see
# peer_death_check.cpp; prints SKIP when the region layout is unknown).
# Runs 4 ranks of peer_death_check under courier-run with COURIER_TIMEOUT_S
# set to TIMEOUT_S; rank 2 kills itself with SIGKILL in the middle of the
# traffic. Passes only if courier-run exits non-zero naming rank 2's signal,
# and each of ranks 0, 1 and 3 logged that rank 2 is gone, printed the failed
# peer (rank 2), and exited non-zero on its own within TIMEOUT_S + 5 s of
# rank 2's death (the bound Courier promises; nothing here checks speed
# beyond it). Times come from the ranks' own epoch-millisecond lines.
set -u

courier_run=$1
check=$2
timeout_s=$3
traffic=${4:-writes}
how=${5:-kill}
dead=2
bound_ms=$(((timeout_s + 5) * 1000))

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=$work/stdout
err=$work/stderr

fail() {
  echo "FAIL (peer-death): $*"
  echo "--- stdout"
  cat "$out"
  echo "--- stderr"
  cat "$err"
  exit 1
}

started=$(date +%s%3N)
COURIER_TIMEOUT_S=$timeout_s "$courier_run" -n 4 "$check" --die "$dead" --after-ms 1500 \
  --give-up-s $((timeout_s * 3)) --traffic "$traffic" --how "$how" >"$out" 2>"$err"
status=$?
ended=$(date +%s%3N)
echo "courier-run exited with status $status after $((ended - started)) ms"

if grep -Eq "^\[$dead\] peer_death_check: rank $dead cannot hold .*; SKIP\$" "$out"; then
  grep -E "SKIP\$" "$out" | sed 's/^.*peer_death_check: /SKIP (peer-death): /'
  exit 0
fi
[ "$status" -ne 0 ] || fail "courier-run exited 0"
grep -Eq "^courier-run: rank $dead killed by signal 9 " "$err" ||
  fail "courier-run did not report rank $dead's death"
# The survivors fail within milliseconds of rank 2's death, so courier-run may
# reap one of them before rank 2: its last line names whichever it saw first.
grep -Eq "^courier-run: exiting with status $status: rank [0-9]+ .* first\$" "$err" ||
  fail "courier-run's last line does not say how the job ended"

killed_at=$(sed -n "s/^\\[$dead\\] peer_death_check: rank $dead kills itself at \\([0-9]*\\)\$/\\1/p" "$out")
[ -n "$killed_at" ] || fail "rank $dead never said it was killing itself"

for rank in 0 1 3; do
  exit_line=$(grep -E "^\\[$rank\\] peer_death_check: rank $rank exits with status [0-9]+ at [0-9]+\$" "$out")
  [ -n "$exit_line" ] || fail "rank $rank did not exit on its own"
  rank_status=$(printf '%s\n' "$exit_line" | sed 's/.* status \([0-9]*\) at.*/\1/')
  exited_at=$(printf '%s\n' "$exit_line" | sed 's/.* at \([0-9]*\)$/\1/')
  [ "$rank_status" -ne 0 ] || fail "rank $rank exited 0 although rank $dead died"
  elapsed=$((exited_at - killed_at))
  echo "rank $rank exited with status $rank_status ${elapsed} ms after rank $dead died (bound ${bound_ms} ms)"
  [ "$elapsed" -le "$bound_ms" ] || fail "rank $rank took ${elapsed} ms, more than ${bound_ms} ms"
  grep -Eq "^\\[$rank\\] courier\\[rank $rank\\] error context: rank $dead is gone" "$err" ||
    fail "rank $rank did not log that rank $dead is gone"
  grep -Eq "^\\[$rank\\] peer_death_check: rank $rank: rank $dead failed: .*rank $dead" "$out" ||
    fail "rank $rank did not report rank $dead as its failed peer"
done
echo "PASS (peer-death)"
