#!/bin/sh
# expect_output.sh REGEX COMMAND ARGS...: runs COMMAND, shows its output, and
# fails unless it exits 0 AND some output line matches REGEX (grep -E). ctest's
# PASS_REGULAR_EXPRESSION alone would ignore the exit status.
regex=$1
shift
out=$("$@" 2>&1)
status=$?
printf '%s\n' "$out"
if [ "$status" -ne 0 ]; then
  echo "expect_output: '$1' exited with status $status" >&2
  exit 1
fi
if ! printf '%s\n' "$out" | grep -Eq -- "$regex"; then
  echo "expect_output: no output line matches: $regex" >&2
  exit 1
fi
