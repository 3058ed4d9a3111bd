#!/bin/sh
# shm_files.sh CASE COURIER_RUN PROGRAM
#
# Over libfabric's shm provider every endpoint has a 16 MiB region in
# /dev/shm, named courier-<pid>-<16 hex digits> after its process
# (docs/launching.md). A rank killed by a signal cannot remove its own:
#
#   dead-rank  PROGRAM is peer_death_check: 2 ranks over shm, rank 1 kills
#              itself with SIGKILL mid-traffic. Once courier-run exited, no
#              region of either rank's process remains, and courier-run said
#              it removed rank 1's.
set -u

case_name=$1
courier_run=$2
program=$3

work=$(mktemp -d)
out=$work/stdout
err=$work/stderr
trap 'rm -rf "$work"' EXIT

fail() {
  echo "FAIL ($case_name): $*"
  echo "--- stdout"
  cat "$out"
  echo "--- stderr"
  cat "$err"
  exit 1
}
# The regions in /dev/shm of process $1 (the id matched whole).
regions_of() {
  for file in /dev/shm/courier-"$1"-*; do
    [ ! -e "$file" ] || printf '%s\n' "${file#/dev/shm/}"
  done
}

case "$case_name" in
dead-rank)
  COURIER_TIMEOUT_S=10 "$courier_run" -n 2 "$program" --die 1 --after-ms 1500 --give-up-s 60 \
    >"$out" 2>"$err"
  status=$?
  [ "$status" -ne 0 ] || fail "courier-run exited 0 although rank 1 was killed"
  grep -Eq '^\[1\] peer_death_check: rank 1 kills itself at [0-9]+$' "$out" ||
    fail "rank 1 never killed itself"
  for rank in 0 1; do
    pid=$(sed -n "s/^\\[$rank\\] peer_death_check: rank $rank is process \\([0-9]*\\)\$/\\1/p" "$out")
    [ -n "$pid" ] || fail "rank $rank did not say its process id"
    left=$(regions_of "$pid")
    [ -z "$left" ] || fail "rank $rank (process $pid) left in /dev/shm: $left"
    [ "$rank" -eq 0 ] || dead=$pid
  done
  grep -Eq "^courier-run: removed the shared-memory files? rank 1 left: /dev/shm/courier-$dead-[0-9a-f]{16}" "$err" ||
    fail "courier-run did not say it removed rank 1's regions"
  ;;
*)
  echo "unknown case '$case_name'"
  exit 2
  ;;
esac
echo "PASS ($case_name)"
