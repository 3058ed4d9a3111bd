#!/usr/bin/env bash
# Where the time of the direct path's calls goes, on one GPU, one rank: the
# kernels' steps (COURIER_CUDA_EP_TIMELINE=1: per step, the device clock
# from a kernel's first block's start to the last block passing it, medians)
# at the low-latency shape and its high-throughput FP8 twin of
# docs/performance.md, on the caller's stream; with NCU=1 also Nsight
# Compute's stall reasons for the low-latency dispatch and combine kernels
# and the source lines where their warps stall most (build with
# -DCMAKE_CUDA_FLAGS=-lineinfo for the lines); with DURATIONS=1 the
# low-latency kernels' durations as a profiler reports them; with
# SKELETON=1 what the dispatch kernel's synchronization costs by itself
# (tests/gpu/sync_skeleton.cu); with FLOOR=1 what a launch and a stream
# synchronization add to a kernel's time on this host, the floor under a
# call's wall time (tests/gpu/launch_floor.cu), and how fast this GPU moves a
# high-throughput phase's rows by the shape of the copy (tests/gpu/copy_floor.cu,
# the floor under the EP1 combine's reduce). Expects a build of courier-bench,
# courier-run and courier-gpu-cuda in BUILD.
#
#   tests/gpu/ep_steps.sh
#   NCU=1 tests/gpu/ep_steps.sh
#   DURATIONS=1 SKELETON=1 FLOOR=1 tests/gpu/ep_steps.sh
# Knobs: BUILD (build-gpu), ITERS (100), OUT ($BUILD/ep-steps: the
# profiler's reports), NCU (0), DURATIONS (0), SKELETON (0), FLOOR (0).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build-gpu}
ITERS=${ITERS:-100}
OUT=${OUT:-$BUILD/ep-steps}
NCU=${NCU:-0}
DURATIONS=${DURATIONS:-0}
SKELETON=${SKELETON:-0}
FLOOR=${FLOOR:-0}
mkdir -p "$OUT"
bin=$PWD/$BUILD/bin
for need in "$bin/courier-bench" "$bin/courier-run" "$PWD/$BUILD/lib/courier"; do
  [ -e "$need" ] || { echo "ep_steps: $need is missing: build $BUILD first" >&2; exit 1; }
done
export NCCL_NVLS_ENABLE=0 COURIER_GPU_BACKEND=cuda COURIER_EP_TRANSPORT=direct
export COURIER_BACKEND_PATH=$PWD/$BUILD/lib/courier
ll=(--mode ll --tokens 128 --hidden 7168 --topk 8 --experts 288 --fp8 --unmasked)
ht8=(--mode ht --tokens 4096 --hidden 7168 --topk 8 --experts 256 --fp8)
for shape in ll ht8; do
  args=("${ll[@]}")
  [ "$shape" = ht8 ] && args=("${ht8[@]}")
  echo "=== steps, caller's stream: courier-bench ep ${args[*]}"
  # The per-block medians ("(block)") and the bench's own table are left out.
  COURIER_CUDA_EP_TIMELINE=1 timeout 120 "$bin/courier-run" --timeout 110 -n 1 \
    "$bin/courier-bench" ep "${args[@]}" --iters "$ITERS" --stream caller 2>&1 |
    grep -E '^\[0\]   ' | grep -v '(block)'
done
if [ "$DURATIONS" = 1 ]; then
  # The kernels' own durations as a profiler reports them (what DeepEP's
  # tests print: no events around them), caches and clocks left as they are.
  command -v ncu >/dev/null || { echo "ep_steps: DURATIONS=1 but ncu is not on PATH" >&2; exit 1; }
  echo "=== kernel durations (ncu gpu__time_duration, 40 calls each): ${ll[*]}"
  timeout 300 ncu --cache-control none --clock-control none --metrics gpu__time_duration.sum \
    -k "regex:^(dispatch|combine)" -s 40 -c 80 \
    "$bin/courier-run" --timeout 280 -n 1 "$bin/courier-bench" ep "${ll[@]}" --iters 60 \
    --stream caller >"$OUT/durations.txt" 2>&1 || { tail -5 "$OUT/durations.txt"; exit 1; }
  python3 - "$OUT/durations.txt" <<'PY'
import re, statistics, sys
kernel, times = None, {}
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"\s*(?:void )?(?:[\w:]*::)?(dispatch|combine)[(<]", line)
    if m:
        kernel = m.group(1)
    m = re.search(r"gpu__time_duration.sum\s+(\S+)\s+([\d.,]+)", line)
    if m and kernel:
        value = float(m.group(2).replace(",", ""))
        times.setdefault(kernel, []).append(value / 1000 if m.group(1) in ("ns", "nsecond") else value)
for kernel, us in times.items():
    print(f"  {kernel:9} {len(us):3} kernels  median {statistics.median(us):6.2f} us  min {min(us):6.2f} us")
if not times:
    sys.exit("ep_steps: no kernel durations in " + sys.argv[1])
PY
fi
if [ "$SKELETON" = 1 ]; then
  echo "=== the dispatch kernel's synchronization by itself (tests/gpu/sync_skeleton.cu)"
  nvcc -O2 -std=c++17 -arch=native tests/gpu/sync_skeleton.cu -o "$OUT/sync_skeleton" &&
    "$OUT/sync_skeleton"
fi
if [ "$FLOOR" = 1 ]; then
  echo "=== a launch and a synchronization around a kernel (tests/gpu/launch_floor.cu)"
  nvcc -O2 -std=c++17 -arch=native tests/gpu/launch_floor.cu -o "$OUT/launch_floor" &&
    "$OUT/launch_floor"
  echo "=== a high-throughput phase's rows copied, by shape (tests/gpu/copy_floor.cu)"
  nvcc -O3 -std=c++17 -arch=native tests/gpu/copy_floor.cu -o "$OUT/copy_floor" &&
    "$OUT/copy_floor"
fi
[ "$NCU" = 1 ] || exit 0
command -v ncu >/dev/null || { echo "ep_steps: NCU=1 but ncu is not on PATH" >&2; exit 1; }
for kernel in dispatch combine; do
  echo "=== ncu: the low-latency $kernel kernel (--clock-control none)"
  timeout 300 ncu --clock-control none --target-processes all -k "regex:^$kernel" -s 30 -c 1 \
    --set full --import-source yes --export "$OUT/ll_$kernel" --force-overwrite \
    "$bin/courier-run" --timeout 280 -n 1 "$bin/courier-bench" ep "${ll[@]}" --iters 40 \
    >"$OUT/ncu_run_$kernel.txt" 2>&1 || { tail -5 "$OUT/ncu_run_$kernel.txt"; continue; }
  ncu -i "$OUT/ll_$kernel.ncu-rep" --print-details all --section SpeedOfLight \
    --section WarpStateStats --section LaunchStats 2>&1 |
    grep -E 'Duration|Issued Warp Per Scheduler|No Eligible|Stall [A-Z]|Registers Per Thread' |
    sort -u -k1,2 | head -24
  # Source lines by warp stall samples, the 15 largest.
  ncu -i "$OUT/ll_$kernel.ncu-rep" --page source --csv --print-source cuda,sass 2>/dev/null |
    python3 tests/gpu/ncu_stall_lines.py 15
done
