#!/usr/bin/env bash
# Runs Courier's torch-based GPU checks on a host with 2 GPUs: the intranode and the
# low-latency tests through courier.deep_ep, then the Python benchmark at the field's
# standard shapes; prints a pass/fail table and exits non-zero if anything failed.
#
# Assumes `pip install .` was done for the python3 on PATH (torch with NCCL installed too).
#   tests/python/gpu/run.sh                 everything (small and standard shapes)
#   SHAPES=small tests/python/gpu/run.sh    a quick run
# Knobs: NPROC (default 2), SHAPES (small|standard|all), TIMEOUT_S per step (default 1800),
# BENCH=0 to skip the benchmark.
set -u
cd "$(dirname "$0")/../../.."

# NVLink multicast (NVLS) stays off for NCCL on the GPU host, as in tests/gpu/run.sh.
export NCCL_NVLS_ENABLE=0
# Courier's rendezvous admits only ranks presenting the job's token; courier-run sets it,
# torchrun does not, so one random value goes to every rank through the environment.
export COURIER_JOB_TOKEN=${COURIER_JOB_TOKEN:-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')}
NPROC=${NPROC:-2}
SHAPES=${SHAPES:-all}
TIMEOUT_S=${TIMEOUT_S:-1800}
BENCH=${BENCH:-1}
PYTHON=${PYTHON:-python3}

if ! "$PYTHON" -c "import torch, torch.distributed, courier.deep_ep" 2>/tmp/courier-gpu-import.$$; then
  echo "run.sh: cannot import torch and courier.deep_ep with $PYTHON:" >&2
  cat /tmp/courier-gpu-import.$$ >&2
  rm -f /tmp/courier-gpu-import.$$
  echo "run.sh: install the package first (pip install . from the repository root)" >&2
  exit 2
fi
rm -f /tmp/courier-gpu-import.$$

names=()
verdicts=()
failed=0

step() {
  local name=$1
  shift
  echo "== $name: $*"
  timeout "$TIMEOUT_S" "$@"
  local rc=$?
  names+=("$name")
  if [ "$rc" -eq 0 ]; then
    verdicts+=("pass")
  elif [ "$rc" -eq 124 ]; then
    verdicts+=("FAIL (timed out after ${TIMEOUT_S} s)")
    failed=$((failed + 1))
  else
    verdicts+=("FAIL (exit $rc)")
    failed=$((failed + 1))
  fi
}

launch=("$PYTHON" -m torch.distributed.run --standalone --nproc-per-node "$NPROC")

step intranode "${launch[@]}" tests/python/gpu/test_intranode.py --shapes "$SHAPES"
step low_latency "${launch[@]}" tests/python/gpu/test_low_latency.py --shapes "$SHAPES"
if [ "$BENCH" != 0 ]; then
  step bench-ht "${launch[@]}" tools/deep_ep_bench.py --mode ht --ht-tokens 4096 \
    --hidden 7168 --topk 8 --ht-experts 256
  step bench-ll "${launch[@]}" tools/deep_ep_bench.py --mode ll --ll-tokens 128 \
    --hidden 7168 --topk 8 --ll-experts 288
  step bench-ll-fp8 "${launch[@]}" tools/deep_ep_bench.py --mode ll --ll-tokens 128 \
    --hidden 7168 --topk 8 --ll-experts 288 --fp8
fi

echo
printf '%-14s %s\n' "step" "result"
for i in "${!names[@]}"; do
  printf '%-14s %s\n' "${names[$i]}" "${verdicts[$i]}"
done
echo "$(( ${#names[@]} - failed )) passed, $failed failed"
[ "$failed" -eq 0 ]
