#!/usr/bin/env bash
# Expert parallelism before and after a change, side by side in one run on
# one GPU: builds BEFORE_SRC (a source tree, e.g. `git archive REV | tar -x
# -C DIR`, carried to the GPU host) and this tree, then runs courier-bench ep
# at the low-latency and high-throughput shapes of docs/performance.md on
# both, alternately, REPS times, on the Buffer's own stream and the
# caller's; prints one line per call: median and p99 us, GPU us, kernel
# launches and host waits per call.
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
printf '%-4s %-7s %-7s %-4s %-9s %9s %9s %8s %9s %6s\n' rep build stream mode phase median p99 \
  gpu launches waits
for rep in $(seq "$REPS"); do
  for which in before after; do
    build=$root/$BUILD
    [ "$which" = before ] && build=$before_build
    for stream in own caller; do
      for mode in ll ht; do
        shape=("${ll[@]}")
        [ "$mode" = ht ] && shape=("${ht[@]}")
        COURIER_BACKEND_PATH=$build/lib/courier "$build/bin/courier-run" --timeout 300 -n 1 \
          "$build/bin/courier-bench" ep "${shape[@]}" --stream "$stream" 2>&1 |
          awk -v r="$rep" -v b="$which" -v s="$stream" -v m="$mode" '/courier-(direct|proxy)/ {
            printf "%-4s %-7s %-7s %-4s %-9s %9s %9s %8s %9s %6s\n", r, b, s, m, $4, $12, $13, $17, $18, $19 }'
      done
    done
  done
done
