#!/bin/sh
# Integration tests of courier-run and of the bootstrap across real processes.
#
#   launch_tests.sh CASE COURIER_RUN LAUNCH_PROBE BOOTSTRAP_CHECK [MPIRUN]
#
# Each CASE runs a job and checks its exit status and output. Nothing here
# depends on timing: ranks that must be running before something happens say
# so through files (see launch_probe.cpp), and a rank that should have been
# stopped is detected by the "woke up" line it would print after 60 s.
set -u

case_name=$1
courier_run=$2
probe=$3
bootstrap_check=$4
mpirun=${5:-}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=$work/stdout
err=$work/stderr
status=0

fail() {
  echo "FAIL ($case_name): $*"
  echo "--- stdout"
  cat "$out"
  echo "--- stderr"
  cat "$err"
  exit 1
}
run() {
  "$@" >"$out" 2>"$err"
  status=$?
}
expect_status() { [ "$status" -eq "$1" ] || fail "exit status $status, expected $1"; }
expect_out() { grep -Eq -- "$1" "$out" || fail "stdout lacks /$1/"; }
expect_err() { grep -Eq -- "$1" "$err" || fail "stderr lacks /$1/"; }
forbid_out() { ! grep -Eq -- "$1" "$out" || fail "stdout has /$1/"; }
# Waits for a file to appear (60 s at most: only a broken launcher needs that).
wait_for_file() {
  i=0
  while [ ! -e "$1" ]; do
    i=$((i + 1))
    [ "$i" -le 600 ] || fail "$1 never appeared"
    sleep 0.1
  done
}
# Whether process $1 runs: a zombie does not (once courier-run is gone,
# nobody may reap its orphans, and kill -0 still finds a zombie).
is_running() {
  state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
  [ -n "$state" ] && [ "$state" != Z ]
}
# The ranks recorded their pids in ready-N files; none may still be alive.
expect_ranks_gone() {
  for file in "$work"/ready-*; do
    [ -e "$file" ] || continue
    pid=$(cat "$file")
    if kill -0 "$pid" 2>/dev/null; then fail "rank process $pid outlived courier-run"; fi
  done
}

case "$case_name" in
environment)
  run "$courier_run" -n 3 "$probe" env
  expect_status 0
  for rank in 0 1 2; do
    expect_out "^\\[$rank\\] rank=$rank size=3 local_rank=$rank local_size=3 bootstrap=127\\.0\\.0\\.1:[0-9]+ token=[0-9a-f]{64}\$"
    expect_err "^\\[$rank\\] probe stderr from rank $rank\$"
  done
  # One rendezvous and one token for the whole job.
  [ "$(sed -n 's/.*bootstrap=\([^ ]*\) token=\(.*\)$/\1 \2/p' "$out" | sort -u | wc -l)" -eq 1 ] ||
    fail "ranks got different COURIER_BOOTSTRAP or COURIER_JOB_TOKEN values"
  # Programs are also found through PATH, and '--' ends courier-run's options.
  run "$courier_run" -n 1 -- sh -c 'echo "via PATH: $COURIER_RANK/$COURIER_WORLD_SIZE"'
  expect_status 0
  expect_out '^\[0\] via PATH: 0/1$'
  ;;
whole-lines)
  run "$courier_run" -n 4 "$probe" chatter 400
  expect_status 0
  "$probe" verify-chatter "$out" 4 400 >"$work/verify" || { cat "$work/verify"; fail "interleaved or missing lines"; }
  ;;
failing-rank)
  # --grace 0: the sleeping probes would never exit on their own.
  run "$courier_run" -n 3 --grace 0 "$probe" fail-rank 1 3 "$work"
  expect_status 3
  expect_err '^courier-run: rank 1 exited with status 3; stopping the other ranks$'
  expect_out '^\[0\] probe: rank 0 sleeping$'
  expect_out '^\[1\] probe: rank 1 exiting with 3$'
  forbid_out 'woke up'
  expect_ranks_gone
  ;;
crashing-rank)
  run "$courier_run" -n 2 --grace 0 "$probe" crash-rank 1 "$work"
  expect_status 139
  expect_err '^courier-run: rank 1 killed by signal 11 \(Segmentation fault\); stopping the other ranks$'
  forbid_out 'woke up'
  expect_ranks_gone
  ;;
not-executable)
  run "$courier_run" -n 2 "$work/no-such-program"
  expect_status 127
  expect_err "^courier-run: cannot execute '$work/no-such-program': No such file or directory\$"
  printf 'not a program\n' >"$work/plain-file"
  run "$courier_run" -n 2 "$work/plain-file"
  expect_status 127
  expect_err "^courier-run: cannot execute '$work/plain-file': Permission denied\$"
  run "$courier_run" -n 1 courier-no-such-program-anywhere
  expect_status 127
  expect_err "^courier-run: cannot execute 'courier-no-such-program-anywhere': not found in PATH\$"
  ;;
bad-arguments)
  run "$courier_run" -n 0 "$probe" env
  expect_status 2
  expect_err "^courier-run: -n expects a positive integer \\(number of ranks\\), got '0'\$"
  run "$courier_run" -n two "$probe" env
  expect_status 2
  expect_err "got 'two'"
  run "$courier_run" "$probe" env
  expect_status 2
  expect_err '^courier-run: -n N is required'
  run "$courier_run" -n 2 --timeout -5 "$probe" env
  expect_status 2
  expect_err "^courier-run: --timeout expects a positive integer \\(seconds\\), got '-5'\$"
  run "$courier_run" -n 2
  expect_status 2
  expect_err 'no program given'
  ;;
timeout)
  run "$courier_run" -n 2 --timeout 1 "$probe" sleep "$work"
  expect_status 124
  expect_err '^courier-run: timed out after 1 s with ranks 0, 1 still running; stopping them$'
  forbid_out 'woke up'
  expect_ranks_gone
  ;;
signal-forwarding)
  "$courier_run" -n 2 "$probe" sleep "$work" >"$out" 2>"$err" &
  launcher=$!
  wait_for_file "$work/ready-0"
  wait_for_file "$work/ready-1"
  kill -TERM "$launcher"
  wait "$launcher"
  status=$?
  expect_status 143
  expect_err '^courier-run: received SIGTERM; passing it on to the ranks$'
  forbid_out 'woke up'
  expect_ranks_gone
  ;;
launcher-killed)
  # SIGKILL leaves courier-run no chance to stop its ranks: they must die
  # with it (PR_SET_PDEATHSIG) instead of sleeping on with nobody reading
  # their output.
  "$courier_run" -n 2 "$probe" sleep "$work" >"$out" 2>"$err" &
  launcher=$!
  wait_for_file "$work/ready-0"
  wait_for_file "$work/ready-1"
  kill -KILL "$launcher"
  wait "$launcher"
  status=$?
  expect_status 137
  # The kernel signals them at once; 20 s leaves a loaded machine time to
  # run them (the probes themselves sleep 60 s).
  for file in "$work"/ready-*; do
    pid=$(cat "$file")
    i=0
    while is_running "$pid"; do
      i=$((i + 1))
      if [ "$i" -gt 200 ]; then
        # shellcheck disable=SC2046 # one pid per word
        kill -KILL $(cat "$work"/ready-*) 2>/dev/null
        fail "rank process $pid still runs 20 s after courier-run was killed"
      fi
      sleep 0.1
    done
  done
  ;;
bootstrap-tcp)
  run "$courier_run" -n 4 "$bootstrap_check"
  expect_status 0
  for rank in 0 1 2 3; do
    expect_out "^\\[$rank\\] bootstrap_check: rank $rank of 4 ok \\(tcp\\)\$"
  done
  ;;
bootstrap-peer-death)
  # Started by hand rather than by courier-run, which would stop the
  # survivors before they could report: they must name the dead rank.
  port=$("$bootstrap_check" --free-port) || fail "no free port"
  token=0123456789abcdef0123456789abcdef
  for rank in 0 1 2; do
    COURIER_RANK=$rank COURIER_WORLD_SIZE=3 COURIER_BOOTSTRAP=127.0.0.1:$port \
      COURIER_JOB_TOKEN=$token "$bootstrap_check" --die 2 >"$work/out-$rank" 2>"$work/err-$rank" &
    eval "pid_$rank=\$!"
  done
  for rank in 0 1 2; do
    eval "wait \$pid_$rank"
    eval "status_$rank=\$?"
  done
  cat "$work"/out-* >"$out"
  cat "$work"/err-* >"$err"
  [ "$status_2" -eq 5 ] || fail "rank 2 exit status $status_2, expected 5"
  for rank in 0 1; do
    eval "[ \"\$status_$rank\" -eq 1 ]" || fail "rank $rank should have failed"
    # Seen in the collective, or by the liveness monitor just before it.
    grep -Eq 'bootstrap: rank 2 \(127\.0\.0\.1:[0-9]+\) (disconnected during allgather #1|is gone)' "$work/err-$rank" ||
      fail "rank $rank's error does not name rank 2"
  done
  ;;
bootstrap-mpi)
  [ -n "$mpirun" ] || fail "no mpirun given"
  # What works in a container: only the self and shared-memory transports
  # (no network probing), no cross-process memory attach (often forbidden by
  # the container's ptrace policy), and local launch without ssh. Open MPI
  # itself leaks at MPI_Finalize (partly in components it has unloaded, so
  # they cannot be suppressed by name): leak checking is off for this case.
  run env OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none \
    OMPI_MCA_plm=isolated ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
    "$mpirun" --allow-run-as-root --oversubscribe -np 2 "$bootstrap_check" --mpi
  expect_status 0
  expect_out '^bootstrap_check: rank 0 of 2 ok \(mpi\)$'
  expect_out '^bootstrap_check: rank 1 of 2 ok \(mpi\)$'
  ;;
*)
  echo "unknown case '$case_name'"
  exit 2
  ;;
esac
echo "PASS ($case_name)"
