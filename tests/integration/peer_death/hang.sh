#!/bin/sh
# hang.sh COURIER_RUN PEER_DEATH_CHECK TIMEOUT_S
#
# Runs 4 ranks of peer_death_check with COURIER_TIMEOUT_S=TIMEOUT_S; rank 2
# stops itself with SIGSTOP in the middle of the traffic: alive, but silent.
# Passes only if the hang became an error: some rank's proxy printed the
# diagnostic dump (per channel head/tail/in flight, per peer outstanding
# operations and sequence numbers), every dump points at rank 2, and each of
# ranks 0, 1 and 3 either printed such a dump or was told by a rank that did
# (the first rank to time out tells every rank, so the others may fail before
# their own timeout); they stopped their traffic with an error; courier-run
# exited non-zero.
set -u

courier_run=$1
check=$2
timeout_s=$3

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=$work/stdout
err=$work/stderr

fail() {
  echo "FAIL (hang): $*"
  echo "--- stdout"
  cat "$out"
  echo "--- stderr"
  cat "$err"
  exit 1
}

COURIER_TIMEOUT_S=$timeout_s "$courier_run" --grace $((timeout_s * 3)) -n 4 "$check" --die 2 \
  --how stop --after-ms 1500 --give-up-s $((timeout_s * 6)) >"$out" 2>"$err"
status=$?
echo "courier-run exited with status $status"
[ "$status" -ne 0 ] || fail "courier-run exited 0"
grep -q "made no progress for" "$err" || fail "no proxy printed a diagnostic dump"
grep -q "channel [0-9]*: head [0-9na/]* (pushed), tail [0-9]* (taken by the proxy), completed" "$err" ||
  fail "the dump shows no channel state"
grep -q "rank 2: [0-9]* commands outstanding to it ([0-9]* of them emulated atomics awaiting its answer), [0-9]* commands for it waiting in the rings" "$err" ||
  fail "the dump shows no per-peer state for rank 2"
grep -q "most likely stuck on rank 2:" "$err" || fail "no dump points at rank 2"
if grep -o "most likely stuck on rank [0-9]*" "$err" | grep -qv "rank 2$"; then
  fail "a dump points at a rank other than rank 2"
fi
for rank in 0 1 3; do
  grep -q "^\[$rank\] .*most likely stuck on rank 2:" "$err" ||
    grep -q "^\[$rank\] .*rank 2 is gone or failed" "$err" ||
    fail "rank $rank neither dumped pointing at rank 2 nor was told rank 2 failed"
  grep -q "rank $rank: traffic stopped: " "$out" || fail "rank $rank did not stop with an error"
done
echo "PASS: the hang of rank 2 became errors with a dump pointing at it"
