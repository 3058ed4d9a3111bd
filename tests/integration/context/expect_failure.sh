#!/bin/sh
# expect_failure.sh REGEX COMMAND ARGS...: runs COMMAND, shows its output, and
# passes only if it exits non-zero AND some output line matches REGEX
# (grep -E): a bad input must fail, and say why.
regex=$1
shift
out=$("$@" 2>&1)
status=$?
printf '%s\n' "$out"
if [ "$status" -eq 0 ]; then
  echo "expect_failure: '$1' succeeded but should have failed" >&2
  exit 1
fi
if ! printf '%s\n' "$out" | grep -Eq -- "$regex"; then
  echo "expect_failure: no output line matches: $regex" >&2
  exit 1
fi
