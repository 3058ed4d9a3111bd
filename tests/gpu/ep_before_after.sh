#!/usr/bin/env bash
# Expert parallelism before and after a change, side by side in one run on
# one GPU: builds BEFORE_SRC (a source tree, e.g. `git archive REV | tar -x
# -C DIR`, carried to the GPU host) and this tree, then runs courier-bench ep
# at the low-latency and high-throughput shapes of docs/performance.md on
# both, alternately, REPS times, on the Buffer's own stream and the
# caller's (high-throughput in bfloat16 and, its FP8 twin, --fp8: a build
# whose bench refuses that prints no row for it); prints one line per call: median and p99 us, GPU us, host us
# (the call until it returned, caller's stream), kernel launches and host
# waits per call (from the JSON rows: '-' where a build does not print one).
#
#   BEFORE_SRC=/path/to/old/tree tests/gpu/ep_before_after.sh
# Knobs: TRANSPORT (direct | proxy: nic-ce with loopback), REPS (2), ITERS
# (200), BUILD (build-gpu), DEPS (build-deps: tests/gpu/make_deps.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${BEFORE_SRC:?BEFORE_SRC must name the source tree to compare with}"
root=$PWD
BUILD=${BUILD:-build-gpu}
DEPS=${DEPS:-build-deps}
REPS=${REPS:-2}
ITERS=${ITERS:-200}
TRANSPORT=${TRANSPORT:-direct}
before_build=$BEFORE_SRC/build-gpu
configure=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOURIER_WITH_CUDA=ON -DCOURIER_WITH_HIP=OFF
  -DCOURIER_WITH_PYTHON=OFF)
[ -f "$DEPS/include/dlpack/dlpack.h" ] && configure+=("-DDLPACK_INCLUDE_DIR=$root/$DEPS/include")
[ -d "$DEPS/lib/cmake/doctest" ] && configure+=("-Ddoctest_DIR=$root/$DEPS/lib/cmake/doctest")
targets=(courier-bench courier-run courier-gpu-cuda courier-nic-ce)
for pair in "$BEFORE_SRC:$before_build" "$root:$root/$BUILD"; do
  src=${pair%%:*} build=${pair#*:}
  if ! { cmake -S "$src" -B "$build" "${configure[@]}" && cmake --build "$build" -j "$(nproc)" \
    --target "${targets[@]}"; } >"$build.log" 2>&1; then
    echo "ep_before_after: building $src failed:"; tail -20 "$build.log"; exit 1
  fi
done

export NCCL_NVLS_ENABLE=0 COURIER_GPU_BACKEND=cuda COURIER_EP_TRANSPORT=$TRANSPORT
if [ "$TRANSPORT" = proxy ]; then
  export COURIER_EP_LOOPBACK=1 COURIER_NIC_BACKEND=ce CUDA_MODULE_LOADING=EAGER
fi
ll=(--mode ll --tokens 128 --hidden 7168 --topk 8 --experts 288 --fp8 --unmasked --iters "$ITERS")
ht=(--mode ht --tokens 4096 --hidden 7168 --topk 8 --experts 256 --iters "$ITERS")
ht8=("${ht[@]}" --fp8)  # the twin of the low-latency shape (FP8 dispatch)
printf '%-4s %-7s %-7s %-4s %-9s %9s %9s %8s %6s %8s %9s %6s\n' rep build stream mode phase median \
  p99 gpu floor host launches waits
# One line per Courier row of the JSON (fields a build does not print: -).
row='
import json, sys
rep, build, stream, mode = sys.argv[1:5]
for line in sys.stdin:
    line = line[line.find("{"):]
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    if not r["path"].startswith("courier-"):
        continue
    f = lambda k, fmt="{:.1f}": fmt.format(r[k]) if k in r else "-"
    print("%-4s %-7s %-7s %-4s %-9s %9s %9s %8s %6s %8s %9s %6s" % (rep, build, stream, mode,
          r["phase"], f("median_us"), f("p99_us"), f("gpu_median_us"), f("gpu_floor_us"),
          f("host_median_us"), f("launches_per_call"), f("host_waits_per_call")))
'
for rep in $(seq "$REPS"); do
  for which in before after; do
    build=$root/$BUILD
    [ "$which" = before ] && build=$before_build
    for stream in own caller; do
      for mode in ll ht ht8; do
        shape=("${ll[@]}")
        [ "$mode" = ht ] && shape=("${ht[@]}")
        [ "$mode" = ht8 ] && shape=("${ht8[@]}")
        COURIER_BACKEND_PATH=$build/lib/courier "$build/bin/courier-run" --timeout 300 -n 1 \
          "$build/bin/courier-bench" ep "${shape[@]}" --stream "$stream" --json 2>&1 |
          python3 -c "$row" "$rep" "$which" "$stream" "$mode"
      done
    done
  done
done
