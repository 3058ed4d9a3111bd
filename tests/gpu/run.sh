#!/usr/bin/env bash
# Courier's GPU tests and benchmarks in one go, for a GPU host: builds with
# the CUDA backend, runs the tests labelled "gpu", runs the FIFO benchmarks
# and prints a short table at the end. Outputs also go to $OUT when set.
#
#   tests/gpu/run.sh            (BUILD=build-gpu by default)
#   TESTS=gpu-ce BENCH=0 tests/gpu/run.sh   (only tests matching TESTS, no benchmarks)
#   TESTS=gpu-ep BENCH=ep tests/gpu/run.sh  (EP tests, then only the EP benchmarks: Courier
#                                            direct and proxy, NCCL all_to_all_single)
#   EP_RANKS=8 TESTS=none BENCH=ep tests/gpu/run.sh  (EP8 on an 8-GPU host: the EP correctness
#                                            check at the standard shapes and the EP benchmarks at
#                                            8 ranks; EP_RANKS defaults to 2)
# With BENCH=ep and TORCH=1 (the default when $PYTHON imports torch), also the torch tests of
# tests/python/gpu at the standard shapes and tools/deep_ep_bench.py (courier.deep_ep's host
# time per call next to its native time), on each transport, one process per GPU.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-$BUILD/gpu-results}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
export COURIER_BACKEND_PATH="$PWD/$BUILD/lib/courier"

step() { printf '\n=== %s\n' "$*"; }

# Headers a GPU host may lack (DLPack, libfabric): a copy of Debian's in
# build-deps/include is used when the system has none.
extra=()
if [ ! -f /usr/include/dlpack/dlpack.h ] && [ -f build-deps/include/dlpack/dlpack.h ]; then
  extra+=("-DDLPACK_INCLUDE_DIR=$PWD/build-deps/include")
fi

# The Python module (for the torch steps of BENCH=ep) when torch is there.
if [ -z "${TORCH:-}" ]; then
  TORCH=0
  "$PYTHON" -c "import torch" 2>/dev/null && TORCH=1
fi
python_targets=()
if [ "$TORCH" = 1 ]; then
  extra+=(-DCOURIER_WITH_PYTHON=ON "-DPython_EXECUTABLE=$(command -v "$PYTHON")")
  python_targets=(_courier)
fi

step "configure and build ($BUILD)"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOURIER_GPU_TESTS=ON \
  -DCOURIER_WITH_CUDA=ON -DCOURIER_WITH_HIP=OFF "${extra[@]}" >"$OUT/configure.log" 2>&1 ||
  { tail -30 "$OUT/configure.log"; exit 1; }
cmake --build "$BUILD" -j "$(nproc)" --target courier-bench courier-info courier-run \
  courier-gpu-cuda courier-gpu-host courier-nic-ce courier-gpu-backend-test courier-semantics-check \
  ep_check moe_demo "${python_targets[@]}" >"$OUT/build.log" 2>&1 ||
  { grep -E "error|FAILED" -A5 "$OUT/build.log" | head -60; exit 1; }
nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current \
  --format=csv,noheader 2>/dev/null | tee "$OUT/gpus.txt"

step "GPU tests (ctest -L gpu)"
ctest --test-dir "$BUILD" -L gpu ${TESTS:+-R "$TESTS"} --output-on-failure 2>&1 | tee "$OUT/ctest.log" | tail -40
tests_line=$(grep -E "tests passed" "$OUT/ctest.log" || echo "tests: did not run")

if [ "${BENCH:-1}" = 0 ]; then
  printf '\n%s\n' "$tests_line"
  exit 0
fi

bench() {  # bench NAME ARGS...: one courier-bench run, table kept in $OUT/NAME.txt
  local name=$1
  shift
  step "$name: $*"
  "$@" >"$OUT/$name.txt" 2>&1
  local rc=$?
  cat "$OUT/$name.txt"
  return $rc
}
B="$BUILD/bin/courier-bench"

if [ "${BENCH:-1}" = ep ]; then
  # EP2 at the field's standard shapes (docs/performance.md): Courier over the
  # direct path and through the proxy over nic-ce, then NCCL all_to_all_single
  # of the same rows; JSON in $OUT (tools/plot_bench.py draws it).
  ranks=${EP_RANKS:-2}
  R="$BUILD/bin/courier-run --timeout 600 -n $ranks"
  # EAGER: lazy module loading can stall nic-ce's copies (docs/nic-ce.md).
  export COURIER_NIC_BACKEND=ce COURIER_GPU_BACKEND=cuda CUDA_MODULE_LOADING=EAGER
  nvidia-smi topo -m 2>&1 | tee "$OUT/topo.txt"
  # Correctness at the standard shapes on every rank count (the ctests run 2).
  for transport in ${EP_TRANSPORTS:-direct proxy}; do
    step "ep-check-$transport ($ranks ranks, --gpu-shapes)"
    env COURIER_EP_TRANSPORT=$transport $R "$BUILD/tests/ep_check" --gpu-shapes \
      >"$OUT/ep-check-$transport.txt" 2>&1
    echo "ep_check $transport: exit $? ($(grep -cE 'FAIL' "$OUT/ep-check-$transport.txt") FAIL lines)" |
      tee -a "$OUT/ep-check.txt"
    tail -3 "$OUT/ep-check-$transport.txt"
  done
  HT="--mode ht --tokens 512,1024,2048,4096 --hidden 7168 --topk 8 --experts 256 --unmasked"
  LL="--mode ll --tokens 128 --hidden 7168 --topk 8 --experts 288 --unmasked --fp8"
  for transport in ${EP_TRANSPORTS:-direct proxy}; do
    iters=50
    [ "$transport" = proxy ] && iters=5
    for mode in ht ll; do
      args=$HT
      [ "$mode" = ll ] && args=$LL
      step "ep-$mode-$transport"
      env COURIER_EP_TRANSPORT=$transport $R "$B" ep $args --iters $iters --json \
        >"$OUT/ep-$mode-$transport.jsonl" 2>&1 || tail -5 "$OUT/ep-$mode-$transport.jsonl"
    done
  done
  if [ "${NCCL:-1}" = 1 ]; then
    bench nccl python3 tools/nccl_alltoall_bench.py --ranks "$ranks" --ht-tokens 512,1024,2048,4096 \
      --json "$OUT/nccl.json"
  fi
  if [ "$TORCH" = 1 ]; then
    # Through courier.deep_ep, one process per GPU started by torchrun (the
    # process group is Courier's bootstrap; the module is this build's).
    export PYTHONPATH="$PWD/$BUILD/python${PYTHONPATH:+:$PYTHONPATH}"
    export COURIER_JOB_TOKEN=${COURIER_JOB_TOKEN:-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')}
    torchrun=("$PYTHON" -m torch.distributed.run --standalone --nproc-per-node "$ranks")
    shapes=(--mode both --ht-tokens 4096 --ll-tokens 128 --hidden 7168 --topk 8 --ht-experts 256
      --ll-experts 288 --fp8 --iters 200 --warmup 10)
    for transport in ${EP_TRANSPORTS:-direct proxy}; do
      for test in low_latency intranode; do
        step "torch-$test-$transport (standard shapes)"
        env COURIER_EP_TRANSPORT=$transport "${torchrun[@]}" "tests/python/gpu/test_$test.py" \
          --shapes standard >"$OUT/torch-$test-$transport.txt" 2>&1
        echo "torch $test $transport: exit $?" | tee -a "$OUT/torch.txt"
        tail -3 "$OUT/torch-$test-$transport.txt"
      done
      bench "deep-ep-bench-$transport" env COURIER_EP_TRANSPORT=$transport "${torchrun[@]}" \
        tools/deep_ep_bench.py "${shapes[@]}"
    done
  fi
  step "summary ($ranks ranks)"
  printf '%s\n' "$tests_line"
  cat "$OUT/ep-check.txt"
  [ -f "$OUT/torch.txt" ] && cat "$OUT/torch.txt"
  python3 - "$OUT" <<'PY'
import glob, json, os, re, sys
rows = []
for f in sorted(glob.glob(os.path.join(sys.argv[1], "ep-*.jsonl"))):
    for line in open(f):
        line = re.sub(r"^\[\d+\]\s*", "", line.strip())
        if line.startswith("{"):
            rows.append(json.loads(line))
nccl = os.path.join(sys.argv[1], "nccl.json")
if os.path.exists(nccl):
    rows += [dict(r, path="nccl") for r in json.load(open(nccl))["rows"]]
print(f"{'mode':<7}{'phase':<9}{'path':<15}{'tokens':>7}{'median us':>11}{'p99 us':>10}{'GB/s':>9}")
for r in rows:
    print(f"{r['mode']:<7}{r['phase']:<9}{r['path']:<15}{r['tokens']:>7}{r['median_us']:>11.1f}"
          f"{r['p99_us']:>10.1f}{r['gbytes_per_s']:>9.1f}")
PY
  exit 0
fi
bench fifo-1proxy "$B" fifo --gpu cuda --repeats 3 --round-trips 20000
bench fifo-4proxies env COURIER_PROXY_THREADS=4 "$B" fifo --gpu cuda --repeats 3
bench fifo-1proxy-thread-push "$B" fifo --gpu cuda --push thread --commands 20000000 --repeats 3
bench fifo-1proxy-json "$B" fifo --gpu cuda --repeats 3 --round-trips 20000 --json

step "summary"
printf '%s\n' "$tests_line"
printf '%-28s %-8s %14s\n' "benchmark" "path" "M cmds/s"
for name in fifo-1proxy fifo-4proxies fifo-1proxy-thread-push; do
  awk -v n="$name" '$1 == "fifo" { printf "%-28s %-8s %14.2f\n", n, $2, $(NF-1) / 1e6 }' \
    "$OUT/$name.txt"
done
awk '$1 == "gpu->cpu->gpu" { printf "%-28s %-8s %9.2f us median %9.2f us p99\n", "round trip", $2, $4, $5 }' \
  "$OUT/fifo-1proxy.txt"
