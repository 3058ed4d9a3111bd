#!/usr/bin/env bash
# Courier's GPU checks on a host with one GPU, in one go: builds with CUDA
# and the Python module, runs the tests labelled "gpu", ep_check with one
# rank on both EP transports (the proxy path over nic-ce with loopback) and
# with two ranks sharing the GPU (correctness only: the GPU time-slices
# between the two processes, so their timings mean nothing), the torch tests of tests/python/gpu with one rank on both transports, and,
# when DEEPEP_TESTS names a folder holding DeepEP's own tests/*.py (with
# their utils.py), those through a two-line package `deep_ep` that resolves
# to courier.deep_ep (made under $OUT, not in the repository). Prints a
# pass/fail table; exits non-zero if a step failed.
#
#   tests/gpu/one_gpu.sh
#   STEPS="ep torch" SHAPES=small tests/gpu/one_gpu.sh
#   DEEPEP_TESTS=/path/to/DeepEP/tests STEPS=deepep tests/gpu/one_gpu.sh
#   STEPS=bench tests/gpu/one_gpu.sh   # tools/deep_ep_bench.py, both transports
# Knobs: BUILD (build-gpu), OUT ($BUILD/one-gpu), PYTHON (python3, the one
# with torch), STEPS (ctest ep ep2 torch deepep bench; the build always
# runs; default: all but bench; none: only the build),
# SHAPES for the torch tests (small|standard|all, default small), TIMEOUT_S
# per step (900), DEPS: a folder with include/ (dlpack, doctest) and
# lib/cmake/doctest for a host without Debian's packages (build-deps).
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-$BUILD/one-gpu}
PYTHON=${PYTHON:-python3}
STEPS=${STEPS:-ctest ep ep2 torch deepep}
SHAPES=${SHAPES:-small}
TIMEOUT_S=${TIMEOUT_S:-900}
DEPS=${DEPS:-build-deps}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)  # absolute: the steps below run elsewhere too
export NCCL_NVLS_ENABLE=0
export COURIER_BACKEND_PATH="$PWD/$BUILD/lib/courier"
export COURIER_GPU_BACKEND=cuda

names=()
verdicts=()
failed=0
wants() { [[ " $STEPS " == *" $1 "* ]]; }
step() {  # step NAME COMMAND...: output in $OUT/NAME.txt, its tail shown
  local name=$1
  shift
  printf '\n=== %s: %s\n' "$name" "$*"
  timeout "$TIMEOUT_S" "$@" >"$OUT/$name.txt" 2>&1
  local rc=$?
  tail -15 "$OUT/$name.txt"
  names+=("$name")
  if [ "$rc" -eq 0 ]; then
    verdicts+=("pass")
  else
    verdicts+=("FAIL (exit $rc$([ "$rc" -eq 124 ] && echo ", timed out"))")
    failed=$((failed + 1))
  fi
}

configure=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOURIER_GPU_TESTS=ON -DCOURIER_WITH_CUDA=ON
  -DCOURIER_WITH_HIP=OFF -DCOURIER_WITH_PYTHON=ON "-DPython_EXECUTABLE=$(command -v "$PYTHON")")
if [ ! -f /usr/include/dlpack/dlpack.h ] && [ -f "$DEPS/include/dlpack/dlpack.h" ]; then
  configure+=("-DDLPACK_INCLUDE_DIR=$PWD/$DEPS/include")
fi
if [ -d "$DEPS/lib/cmake/doctest" ]; then configure+=("-Ddoctest_DIR=$PWD/$DEPS/lib/cmake/doctest"); fi
printf '=== build (%s)\n' "$BUILD"
if ! cmake -S . -B "$BUILD" -G Ninja "${configure[@]}" >"$OUT/configure.log" 2>&1; then
  tail -30 "$OUT/configure.log"
  exit 1
fi
if ! cmake --build "$BUILD" -j "$(nproc)" --target courier-bench courier-info courier-run \
  courier-gpu-cuda courier-gpu-host courier-nic-ce courier-gpu-backend-test \
  courier-nic-ce-test courier-semantics-check ep_check _courier >"$OUT/build.log" 2>&1; then
  grep -E "error|FAILED" -A5 "$OUT/build.log" | head -60
  exit 1
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
# Whether torch tensors cross through DLPack's C exchange API (docs/python.md).
"$PYTHON" -c "import torch; t = torch.Tensor; print('torch', torch.__version__, 'DLPack C exchange API:',
hasattr(t, '__dlpack_c_exchange_api__') or hasattr(t, '__c_dlpack_exchange_api__'))" 2>/dev/null

if wants ctest; then
  step ctest ctest --test-dir "$BUILD" -L gpu ${TESTS:+-R "$TESTS"} --output-on-failure
fi

run1="$BUILD/bin/courier-run --timeout $TIMEOUT_S -n 1"
if wants ep; then
  step ep-check-direct env COURIER_EP_TRANSPORT=direct $run1 "$BUILD/tests/ep_check"
  step ep-check-proxy env COURIER_EP_TRANSPORT=proxy COURIER_EP_LOOPBACK=1 \
    COURIER_NIC_BACKEND=ce CUDA_MODULE_LOADING=EAGER $run1 "$BUILD/tests/ep_check"
fi
if wants ep2; then  # two ranks, both on the one GPU (the local rank modulo the GPUs)
  run2="$BUILD/bin/courier-run --timeout $TIMEOUT_S -n 2"
  step ep2-check-direct env COURIER_EP_TRANSPORT=direct $run2 "$BUILD/tests/ep_check"
  step ep2-check-proxy env COURIER_EP_TRANSPORT=proxy COURIER_NIC_BACKEND=ce \
    CUDA_MODULE_LOADING=EAGER $run2 "$BUILD/tests/ep_check"
fi

# One rank through torchrun; the process group is Courier's bootstrap.
export PYTHONPATH="$PWD/$BUILD/python${PYTHONPATH:+:$PYTHONPATH}"
torchrun=("$PYTHON" -m torch.distributed.run --standalone --nproc-per-node 1)
# nic-ce's copies are GPU work: lazy module loading stalls them behind a
# first-time kernel load while a Courier kernel waits (docs/nic-ce.md).
proxy_env=(COURIER_EP_TRANSPORT=proxy COURIER_EP_LOOPBACK=1 COURIER_NIC_BACKEND=ce
  CUDA_MODULE_LOADING=EAGER)
if wants torch; then
  for test in low_latency intranode; do
    step "torch-$test-direct" env COURIER_EP_TRANSPORT=direct "${torchrun[@]}" \
      "tests/python/gpu/test_$test.py" --shapes "$SHAPES"
    step "torch-$test-proxy" env "${proxy_env[@]}" "${torchrun[@]}" \
      "tests/python/gpu/test_$test.py" --shapes "$SHAPES"
  done
fi

if wants deepep && [ -n "${DEEPEP_TESTS:-}" ]; then
  # `import deep_ep` gives courier.deep_ep: the module replaces itself.
  mkdir -p "$OUT/shim/deep_ep"
  printf 'import sys, courier.deep_ep as courier_deep_ep\nsys.modules[__name__] = courier_deep_ep\n' \
    >"$OUT/shim/deep_ep/__init__.py"
  shim="$OUT/shim:$PYTHONPATH"
  tests=$(cd "$DEEPEP_TESTS" && pwd)
  for test in low_latency intranode; do
    step "deepep-$test-direct" env COURIER_EP_TRANSPORT=direct PYTHONPATH="$shim:$tests" \
      "$PYTHON" "$tests/test_$test.py" --num-processes 1
    step "deepep-$test-proxy" env "${proxy_env[@]}" PYTHONPATH="$shim:$tests" \
      "$PYTHON" "$tests/test_$test.py" --num-processes 1
  done
fi

if wants bench; then
  # courier.deep_ep's host time per call next to its native time (docs/performance.md).
  shapes=(--mode both --ht-tokens 4096 --ll-tokens 128 --hidden 7168 --topk 8 --ht-experts 256
    --ll-experts 288 --fp8 --iters 200 --warmup 10)
  step bench-direct env COURIER_EP_TRANSPORT=direct "${torchrun[@]}" tools/deep_ep_bench.py "${shapes[@]}"
  step bench-proxy env "${proxy_env[@]}" "${torchrun[@]}" tools/deep_ep_bench.py "${shapes[@]}"
fi

printf '\n%-28s %s\n' step verdict
for i in "${!names[@]}"; do printf '%-28s %s\n' "${names[$i]}" "${verdicts[$i]}"; done
exit $((failed > 0))
