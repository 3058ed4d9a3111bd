#!/usr/bin/env python3
"""NCCL baseline for Courier's expert-parallel benchmark (`courier-bench ep`).

Times torch.distributed.all_to_all_single on BF16 rows for the two EP workloads that
`courier-bench ep` runs, so Courier's numbers can be read against plain NCCL:

  ht  high-throughput: each token goes once to every rank holding one of its top-k experts
  ll  low-latency: every (token, expert) pair travels, no deduplication

Each mode has a dispatch (rows to the experts' ranks) and a combine (the same rows back).
The script spawns one process per rank itself (rank r on cuda:r).

On the GPU host:
    python3 tools/nccl_alltoall_bench.py --ranks 2 --json out.json
Logic check on a machine without GPUs:
    python3 tools/nccl_alltoall_bench.py --ranks 2 --backend gloo --device cpu \\
        --ht-tokens 64 --ll-tokens 16 --hidden 256 --iters 3
"""

import argparse
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

PROG = "nccl_alltoall_bench"
ROW_DTYPE = torch.bfloat16
BYTES_NOTE = (
    "bytes: rows rank 0 sends to other ranks (as courier-bench ep counts them); "
    "the collective also moves the local ones"
)
FIELDS = "mode phase tokens hidden topk experts ranks bytes median_us p99_us gbytes_per_s".split()
# Printed columns as (field, format spec); the JSON rows carry every field.
TABLE = [c.split(":") for c in "mode:<5 phase:<9 tokens:>7 hidden:>7 topk:>5 experts:>8".split()]
TABLE += [
    c.split(":") for c in "bytes:>12 median_us:>11.1f p99_us:>11.1f gbytes_per_s:>9.2f".split()
]


class OneLineParser(argparse.ArgumentParser):
    # A one-line error (no usage dump) is easier to spot in a benchmark log.
    def error(self, message):
        fail(message)


def fail(message):
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(2)


def token_list(text):
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma list of integers: {text!r}")


def parse_args(argv):
    p = OneLineParser(prog=PROG, description="NCCL all_to_all_single baseline for Courier EP")
    p.add_argument("--ranks", type=int, default=2, help="processes, one per GPU")
    p.add_argument("--mode", choices=["ht", "ll", "both"], default="both")
    p.add_argument("--tokens", type=token_list, help="tokens per rank for every mode run")
    p.add_argument("--ht-tokens", type=token_list, default=[4096])
    p.add_argument("--ll-tokens", type=token_list, default=[128])
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--experts", type=int, help="experts for every mode run")
    p.add_argument("--ht-experts", type=int, default=256)
    p.add_argument("--ll-experts", type=int, default=288)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--backend", choices=["nccl", "gloo"], default="nccl")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    return p.parse_args(argv)


def workloads(a):
    """(mode, tokens list, experts) per mode to run; --tokens/--experts override both."""
    modes = ["ht", "ll"] if a.mode == "both" else [a.mode]
    out = []
    for m in modes:
        tokens = a.tokens if a.tokens is not None else getattr(a, f"{m}_tokens")
        experts = a.experts if a.experts is not None else getattr(a, f"{m}_experts")
        out.append((m, tokens, experts))
    return out


def validate(a):
    for name in ("ranks", "hidden", "topk", "iters"):
        if getattr(a, name) <= 0:
            fail(f"--{name} must be positive, got {getattr(a, name)}")
    if a.warmup < 0:
        fail(f"--warmup must not be negative, got {a.warmup}")
    if a.backend == "nccl" and a.device != "cuda":
        fail("--backend nccl needs --device cuda")
    tok_opt = "--tokens" if a.tokens is not None else None
    exp_opt = "--experts" if a.experts is not None else None
    for mode, tokens, experts in workloads(a):
        for t in tokens or [0]:
            if t <= 0:
                fail(f"{tok_opt or f'--{mode}-tokens'} values must be positive, got {t}")
        opt = exp_opt or f"--{mode}-experts"
        if experts <= 0 or experts % a.ranks:
            fail(f"{opt} {experts} is not a positive multiple of --ranks {a.ranks}")
        if a.topk > experts:
            fail(f"--topk {a.topk} exceeds {opt} {experts}")
    if a.device == "cuda":
        found = torch.cuda.device_count()
        if found < a.ranks:
            fail(f"--ranks {a.ranks} needs {a.ranks} GPUs, found {found}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def send_counts(mode, tokens, topk, experts, ranks, rank):
    """Rows this rank sends to each rank under seeded uniform top-k routing."""
    gen = torch.Generator().manual_seed(1234 + rank)
    # The top-k of uniform noise is a uniformly random set of k distinct experts.
    chosen = torch.rand(tokens, experts, generator=gen).topk(topk, dim=1).indices
    dest = chosen // (experts // ranks)
    if mode == "ll":
        return torch.bincount(dest.flatten(), minlength=ranks)
    # ht: a token crosses to a rank once however many of its experts live there.
    hit = torch.zeros(tokens, ranks, dtype=torch.bool).scatter_(1, dest, True)
    return hit.sum(dim=0)


def timed(a, device, call):
    """Microseconds of one collective, started together on all ranks."""
    if a.backend == "nccl":
        dist.barrier(device_ids=[device.index])
    else:
        dist.barrier()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3
    t0 = time.perf_counter()
    call()
    return (time.perf_counter() - t0) * 1e6


def slowest_rank_times(times, device):
    # A collective is only as fast as its slowest rank, so keep the max per iteration.
    t = torch.tensor(times, dtype=torch.float64, device=device)
    dist.reduce(t, dst=0, op=dist.ReduceOp.MAX)
    return sorted(t.tolist())


def check_rows(recv, recv_counts, back, send, ranks):
    # Each source filled its rows with rank+1; a mismatch means the splits are wrong.
    want = torch.repeat_interleave(torch.arange(1, ranks + 1), recv_counts.cpu())
    if not torch.equal(recv[:, 0].float().cpu(), want.float()) or not torch.equal(back, send):
        raise RuntimeError(f"{PROG}: all_to_all_single returned wrong rows")


def bench_one(a, device, rank, mode, tokens, experts):
    """Dispatch and combine rows for one (mode, tokens); rank 0 gets the row dicts."""
    ranks = a.ranks
    counts = send_counts(mode, tokens, a.topk, experts, ranks, rank).to(device)
    recv_counts = torch.empty_like(counts)
    dist.all_to_all_single(recv_counts, counts)  # split sizes, outside the timed region
    send_split, recv_split = counts.tolist(), recv_counts.tolist()
    send = torch.full((sum(send_split), a.hidden), rank + 1, dtype=ROW_DTYPE, device=device)
    recv = torch.empty(sum(recv_split), a.hidden, dtype=ROW_DTYPE, device=device)
    back = torch.empty_like(send)
    dispatch = lambda: dist.all_to_all_single(
        recv, send, output_split_sizes=recv_split, input_split_sizes=send_split
    )
    combine = lambda: dist.all_to_all_single(
        back, recv, output_split_sizes=send_split, input_split_sizes=recv_split
    )
    for _ in range(max(a.warmup, 1)):  # at least one untimed pass, whose rows are checked
        timed(a, device, dispatch)
        timed(a, device, combine)
    check_rows(recv, recv_counts, back, send, ranks)
    row_bytes = a.hidden * send.element_size()
    rows = []
    # Bytes to other ranks only, as courier-bench ep counts them.
    remote_send = sum(n for r, n in enumerate(send_split) if r != rank)
    remote_recv = sum(n for r, n in enumerate(recv_split) if r != rank)
    phases = (("dispatch", dispatch, remote_send), ("combine", combine, remote_recv))
    for phase, call, nrows in phases:
        us = slowest_rank_times([timed(a, device, call) for _ in range(a.iters)], device)
        if rank != 0:
            continue
        nbytes = nrows * row_bytes
        median, p99 = us[len(us) // 2], us[min(len(us) - 1, len(us) * 99 // 100)]
        gbps = nbytes / (median * 1e3)
        values = (mode, phase, tokens, a.hidden, a.topk, experts, ranks, nbytes, median, p99, gbps)
        rows.append(dict(zip(FIELDS, values)))
    return rows


def versions(a):
    nccl = None
    if a.device == "cuda" and a.backend == "nccl":
        nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
    return torch.__version__, nccl


def report(a, rows):
    torch_v, nccl_v = versions(a)
    if nccl_v:
        print(f"NCCL all_to_all_single baseline (torch {torch_v}, NCCL {nccl_v})")
    else:
        print(f"{a.backend} all_to_all_single baseline (torch {torch_v}, device {a.device})")
    print(f"ranks: {a.ranks}; {BYTES_NOTE}; latency: max over ranks, {a.iters} iterations")
    print("".join(f"{k.replace('gbytes_per_s', 'GB/s'):{f.split('.')[0]}}" for k, f in TABLE))
    for r in rows:
        print("".join(f"{r[k]:{f}}" for k, f in TABLE))
    if a.json:
        doc = {"tool": PROG, "torch": torch_v, "nccl": nccl_v, "rows": rows}
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")


def worker(rank, a, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NCCL_NVLS_ENABLE="0")
    device = torch.device("cpu")
    if a.device == "cuda":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
    dist.init_process_group(a.backend, rank=rank, world_size=a.ranks)
    try:
        rows = []
        for mode, token_counts, experts in workloads(a):
            for tokens in token_counts:
                rows += bench_one(a, device, rank, mode, tokens, experts)
        if rank == 0:
            report(a, rows)
    finally:
        dist.destroy_process_group()


def main(argv=None):
    a = parse_args(argv)
    validate(a)
    # Required on the 2x H200 host; set before any rank starts so every process inherits it.
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    mp.spawn(worker, args=(a, free_port()), nprocs=a.ranks, join=True)


if __name__ == "__main__":
    main()
