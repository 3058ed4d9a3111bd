#!/bin/sh
# expect_output.sh [--fail] [--ranks N] REGEX COMMAND ARGS...: runs COMMAND
# and shows its output. Passes only if COMMAND exits 0 (with --fail:
# non-zero) AND some output line matches REGEX (grep -E); with --ranks N,
# a line of each rank 0..N-1 (courier-run's "[r] " prefix) must match.
# ctest's PASS_REGULAR_EXPRESSION alone would ignore the exit status; --fail
# checks that bad input fails and says why.
want_failure=0
if [ "$1" = "--fail" ]; then
  want_failure=1
  shift
fi
ranks=0
if [ "$1" = "--ranks" ]; then
  ranks=$2
  shift 2
fi
regex=$1
shift
out=$("$@" 2>&1)
status=$?
printf '%s\n' "$out"
if [ "$want_failure" -eq 1 ] && [ "$status" -eq 0 ]; then
  echo "expect_output: '$1' succeeded but should have failed" >&2
  exit 1
fi
if [ "$want_failure" -eq 0 ] && [ "$status" -ne 0 ]; then
  echo "expect_output: '$1' exited with status $status" >&2
  exit 1
fi
if ! printf '%s\n' "$out" | grep -Eq -- "$regex"; then
  echo "expect_output: no output line matches: $regex" >&2
  exit 1
fi
r=0
while [ "$r" -lt "$ranks" ]; do
  if ! printf '%s\n' "$out" | grep -Eq -- "^\[$r\] .*$regex"; then
    echo "expect_output: no output line of rank $r matches: $regex" >&2
    exit 1
  fi
  r=$((r + 1))
done
