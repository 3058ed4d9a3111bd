#!/usr/bin/env bash
# Runs `courier-bench scale` at several job sizes over libfabric shm and tcp
# (gpu-host, one proxy thread and one channel per rank) and prints its JSON
# lines, for tools/scale_fit.py (growth exponents) and tools/plot_bench.py
# (scale_<unit>.png):
#
#   tools/courier-bench/scale_sweep.sh > sweep.jsonl
#   tools/scale_fit.py sweep.jsonl
#   tools/plot_bench.py sweep.jsonl --out plots/
#
# Knobs: BUILD (build), RANKS ("2 4 8 16 32 64"), PROVIDERS ("shm tcp"),
# TIMEOUT_S per job (600), and courier-bench scale's own flags after `--`
# (for example -- --barrier-iters 50 --ep-iters 10). A job that fails is
# reported on stderr and the sweep goes on; the exit status says whether any
# failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
RANKS=${RANKS:-2 4 8 16 32 64}
PROVIDERS=${PROVIDERS:-shm tcp}
TIMEOUT_S=${TIMEOUT_S:-600}
[ "${1:-}" = "--" ] && shift
for tool in "$BUILD/bin/courier-run" "$BUILD/bin/courier-bench"; do
  [ -x "$tool" ] || { echo "scale_sweep.sh: $tool is missing: build first (BUILD=$BUILD)" >&2; exit 2; }
done
export COURIER_PROXY_THREADS=${COURIER_PROXY_THREADS:-1} COURIER_CHANNELS=${COURIER_CHANNELS:-1}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
export COURIER_BACKEND_PATH=${COURIER_BACKEND_PATH:-$BUILD/lib/courier}
failed=0
for provider in $PROVIDERS; do
  for n in $RANKS; do
    echo "scale_sweep.sh: $n ranks over $provider" >&2
    if ! out=$(timeout "$TIMEOUT_S" "$BUILD/bin/courier-run" --timeout "$TIMEOUT_S" -n "$n" \
      "$BUILD/bin/courier-bench" scale --provider "$provider" --json "$@" 2>&1); then
      echo "scale_sweep.sh: $n ranks over $provider failed:" >&2
      echo "$out" | tail -20 >&2
      failed=1
      continue
    fi
    echo "$out" | grep '"bench":"scale"' | sed 's/^\[[0-9]*\] *//'
  done
done
exit $failed
