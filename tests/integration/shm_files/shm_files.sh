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
#   stale      PROGRAM is write_demo: a region named after a process that no
#              longer exists is removed (and logged) when a job starts; one
#              named after a live process stays.
set -u

case_name=$1
courier_run=$2
program=$3

work=$(mktemp -d)
out=$work/stdout
err=$work/stderr
stale=
kept=
sleeper=
cleanup() {
  [ -z "$stale" ] || rm -f "$stale"
  [ -z "$kept" ] || rm -f "$kept"
  if [ -n "$sleeper" ]; then
    kill "$sleeper" 2>/dev/null
    wait "$sleeper" 2>/dev/null
  fi
  rm -rf "$work"
}
trap cleanup EXIT

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
stale)
  # A process id nobody has now: a shell that has exited (and was reaped).
  dead=$(sh -c 'echo $$')
  ! kill -0 "$dead" 2>/dev/null || fail "process $dead, which exited, exists again"
  sleep 60 &
  sleeper=$!
  stale=/dev/shm/courier-$dead-0123456789abcdef
  kept=/dev/shm/courier-$sleeper-0123456789abcdef
  printf 'stale\n' >"$stale" || fail "cannot create $stale"
  printf 'live\n' >"$kept" || fail "cannot create $kept"
  COURIER_LOG_LEVEL=info "$courier_run" -n 2 "$program" --provider shm >"$out" 2>"$err"
  status=$?
  [ "$status" -eq 0 ] || fail "courier-run exited with status $status"
  [ ! -e "$stale" ] || fail "$stale (process $dead no longer exists) is still there"
  [ -e "$kept" ] || fail "$kept (process $sleeper is alive) was removed"
  # Any job starting on the machine meanwhile removes it too (ctest runs
  # this case alone, but the machine may be shared): then no rank logs it.
  if ! grep -Fq "removed $stale: a stale shm region of process $dead, which no longer exists" "$err"; then
    echo "note: no rank logged that it removed $stale: another job was first"
  fi
  ;;
*)
  echo "unknown case '$case_name'"
  exit 2
  ;;
esac
echo "PASS ($case_name)"
