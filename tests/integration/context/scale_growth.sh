#!/bin/sh
# scale_growth.sh BUILD_DIR RANKS...
#
# Runs courier-bench scale over libfabric shm at the given job sizes
# (tools/courier-bench/scale_sweep.sh) and checks the growth laws of what a
# rank holds (tools/scale_fit.py --check: threads constant; open files,
# connections, resident and registered memory, bootstrap bytes at most
# linear), for the median rank and for the largest (rank 0, the rendezvous,
# which relayed every allgather result before the result tree). Times are
# printed, never checked.
set -u
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
build=$1
shift
out=$(mktemp)
trap 'rm -f "$out"' EXIT
BUILD=$build RANKS="$*" PROVIDERS=shm "$repo/tools/courier-bench/scale_sweep.sh" -- \
  --barrier-iters 20 --ep-iters 3 >"$out" || { echo "FAIL: a scale job failed"; exit 1; }
python3 "$repo/tools/scale_fit.py" --check "$out" || exit 1
python3 "$repo/tools/scale_fit.py" --check --stat max "$out"
