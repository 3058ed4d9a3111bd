#!/usr/bin/env bash
# The proxy path before and after a change, measured in one run on this
# machine: builds the "before" source tree beside this checkout's build,
# then alternates the two, ROUNDS times, on
#   courier-bench fifo                     (one producer into one proxy thread)
#   courier-bench transport --raw          (shm, 4096 and 7168 B, window 64)
# and prints the medians: FIFO commands/s of each, and each transport run's
# Courier / raw ratio (raw is measured beside Courier in the same process
# pair, so the ratio is what a change can move).
#
#   git archive -o /tmp/before.tar <commit>
#   BEFORE_SRC=/tmp/before.tar tools/courier-bench/before_after.sh
#
# Knobs: BEFORE_SRC (a source tree or a tar of one; required), BEFORE_BUILD
# (/tmp/courier-before), AFTER_BUILD (build), ROUNDS (5). Run it on an idle
# machine: the two paths share its cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${BEFORE_SRC:?BEFORE_SRC must name the source tree (or a tar of it) to compare against}"
BEFORE_BUILD=${BEFORE_BUILD:-/tmp/courier-before}
AFTER_BUILD=${AFTER_BUILD:-build}
ROUNDS=${ROUNDS:-5}
targets=(courier-bench courier-run courier-nic-ofi courier-gpu-host)

build() {  # build SRC DIR (logs in DIR)
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$2/before_after.log" 2>&1 &&
    cmake --build "$2" -j "$(nproc)" --target "${targets[@]}" >>"$2/before_after.log" 2>&1 ||
    { grep -E "error|FAILED|Error" -A5 "$2/before_after.log" | head -40; exit 1; }
}

before_src=$BEFORE_SRC
if [ -f "$BEFORE_SRC" ]; then
  before_src=$BEFORE_BUILD-src
  rm -rf "$before_src" && mkdir -p "$before_src"
  tar -xf "$BEFORE_SRC" -C "$before_src"
fi
mkdir -p "$BEFORE_BUILD" "$AFTER_BUILD"
echo "== building before ($before_src) and after (.)"
build "$before_src" "$BEFORE_BUILD"
build . "$AFTER_BUILD"

out=$(mktemp -d)
run() {  # run NAME BUILD ROUND
  local b
  b=$(cd "$2" && pwd)
  "$b/bin/courier-bench" fifo --repeats 1 --json | grep '^{' >"$out/$1.fifo.$3"
  COURIER_BACKEND_PATH="$b/lib/courier" "$b/bin/courier-run" -n 2 "$b/bin/courier-bench" \
    transport --raw --provider shm --sizes 4096,7168 --window 64 --repeats 1 --json |
    sed -n 's/^\[0\] //p' | grep '^{' >"$out/$1.transport.$3"
}
for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r of $ROUNDS"
  run before "$BEFORE_BUILD" "$r"
  run after "$AFTER_BUILD" "$r"
done

python3 - "$out" "$ROUNDS" <<'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def rows(name, kind, r):
    with open(f"{out}/{name}.{kind}.{r}") as f:
        return [json.loads(line) for line in f if line.strip()]
print("| measure | before (median) | after (median) | after / before |")
print("|---|---|---|---|")
def line(label, b, a, fmt):
    mb, ma = statistics.median(b), statistics.median(a)
    print(f"| {label} | {fmt(mb)} | {fmt(ma)} | {ma / mb:.2f} |")
fifo = {n: [next(x["msgs_per_s"] for x in rows(n, "fifo", r) if x["path"] == "courier")
            for r in range(1, rounds + 1)] for n in ("before", "after")}
line("fifo, proxy thread, M cmds/s", fifo["before"], fifo["after"], lambda v: f"{v / 1e6:.1f}")
for size in (4096, 7168):
    ratio = {}
    for n in ("before", "after"):
        ratio[n] = []
        for r in range(1, rounds + 1):
            by = {x["path"]: x["msgs_per_s"] for x in rows(n, "transport", r) if x["size"] == size}
            ratio[n].append(by["courier"] / by["raw"])
    line(f"transport shm {size} B, Courier / raw", ratio["before"], ratio["after"],
         lambda v: f"{v:.2f}")
EOF
rm -rf "$out"
