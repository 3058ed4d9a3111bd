#!/usr/bin/env python3
"""Host time of courier.deep_ep low-latency calls with torch tensors taken
through DLPack's C exchange API against the same calls with DLPack capsules
(torch's to_dlpack), side by side in one process, alternating rounds.

One rank on the host GPU backend (no GPU needed), CPU tensors, a tiny shape
so that the host-run kernels cost little next to the wrapper: the difference
between the rows is the cost of moving the tensors across. Needs a torch
that publishes the exchange API (2.10 and later).

    COURIER_GPU_BACKEND=host COURIER_NIC_BACKEND=ofi COURIER_OFI_PROVIDER=shm \\
        python3 tools/deep_ep_exchange_bench.py [--iters 3000] [--rounds 3]

Prints a table (median microseconds per dispatch + combine pair, and per
tensor conversion in Python) and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

import courier.deep_ep as deep_ep


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not deep_ep._exchanges(torch.Tensor):
        print(f"torch {torch.__version__} publishes no DLPack C exchange API", file=sys.stderr)
        return 2
    hint = deep_ep.Buffer.get_low_latency_rdma_size_hint(16, 128, 1, 4)
    buffer = deep_ep.Buffer(None, num_rdma_bytes=hint, low_latency_mode=True,
                            explicitly_destroy=True)
    x = (torch.arange(2 * 128, dtype=torch.float32).reshape(2, 128) % 7).to(torch.bfloat16)
    idx = torch.tensor([[0, 1], [2, -1]], dtype=torch.int64)
    weights = torch.tensor([[0.5, 0.25], [1.0, 0.0]])

    def pair() -> None:
        recv, _, handle, _, _ = buffer.low_latency_dispatch(x, idx, 16, 4, use_fp8=False)
        buffer.low_latency_combine(recv, idx, weights, handle)

    def median_us(call, n: int) -> float:
        times = []
        for _ in range(n):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1e6

    exchanges = deep_ep._exchanges
    results = {"exchange": {"pair": [], "convert": []}, "capsule": {"pair": [], "convert": []}}
    try:
        for _ in range(args.rounds):
            for path in ("exchange", "capsule"):
                deep_ep._exchanges = exchanges if path == "exchange" else (lambda _type: False)
                pair()  # the outputs of this path exist before timing
                results[path]["pair"].append(median_us(pair, args.iters))
                results[path]["convert"].append(
                    median_us(lambda: deep_ep._to_courier(x, "x"), 10 * args.iters))
    finally:
        deep_ep._exchanges = exchanges
        buffer.destroy()
    rows = {path: {k: statistics.median(v) for k, v in r.items()} for path, r in results.items()}
    print(f"{'path':10s} {'dispatch+combine us':>20s} {'_to_courier us':>15s}")
    for path, row in rows.items():
        print(f"{path:10s} {row['pair']:20.1f} {row['convert']:15.2f}")
    ratio = rows["capsule"]["pair"] / rows["exchange"]["pair"]
    print(f"capsule / exchange (dispatch+combine): {ratio:.2f}")
    print(json.dumps({"bench": "deep_ep_exchange", "torch": torch.__version__,
                      "iters": args.iters, "rounds": args.rounds, "medians_us": rows,
                      "ratio": ratio}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
