"""Helpers shared by Courier's torch-based EP tests (test_intranode.py, test_low_latency.py).

One process per GPU, started by torchrun; torch.distributed (NCCL) forms the group that
`courier.deep_ep.Buffer` is built on. Everything here is plain torch: the process group,
routing, the references the results are checked against, FP8 encoding with one scale per
128 channels, and a small case runner that makes every rank agree on pass or fail, so a
failing check ends the run with a non-zero exit instead of leaving a peer waiting.

The references are computed independently of the code under test (from all ranks' inputs,
gathered), and the checks compare exactly wherever the operation only moves bytes; where it
rounds, the tolerance is derived from the rounding that the format allows, not tuned.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Callable, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0  # largest finite e4m3fn value
FP8_BLOCK = 128  # channels per scale
# e4m3 keeps 3 mantissa bits: a normal value is off by at most 2^-4 of itself after
# rounding to nearest; below 2^-6 the steps are 2^-9, so at most 2^-10 (in scaled units).
FP8_RELATIVE_ERROR = 2.0**-4
FP8_SUBNORMAL_ERROR = 2.0**-10
# One bfloat16 rounding moves a value by at most 2^-8 of its magnitude.
BF16_ROUNDING = 2.0**-8


# ---------------------------------------------------------------- process group


@dataclass
class DistEnv:
    rank: int
    num_ranks: int
    local_rank: int
    device: torch.device
    group: dist.ProcessGroup

    def barrier(self) -> None:
        dist.barrier(group=self.group)
        if self.device.type == "cuda":
            torch.cuda.synchronize()


def add_dist_args(parser: argparse.ArgumentParser) -> None:
    """--backend/--device: nccl on cuda on the GPU host; gloo on cpu only to check the
    scripts' own logic on a machine without GPUs (against a stand-in deep_ep module)."""
    parser.add_argument("--backend", choices=["nccl", "gloo"], default="nccl")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")


def init_dist(backend: str = "nccl", device_type: str = "cuda") -> DistEnv:
    """Joins the torchrun job: rank and size from RANK/WORLD_SIZE/LOCAL_RANK, one GPU each."""
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        if name not in os.environ:
            raise SystemExit(
                f"{name} is not set: start this script with torchrun, e.g. "
                f"'torchrun --nproc-per-node 2 {os.path.basename(sys.argv[0])}'"
            )
    local_rank = int(os.environ["LOCAL_RANK"])
    if device_type == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: torch sees no CUDA device on this machine")
        if local_rank >= torch.cuda.device_count():
            raise SystemExit(
                f"LOCAL_RANK {local_rank} has no GPU: torch sees {torch.cuda.device_count()}"
            )
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        dist.init_process_group(
            backend, device_id=device, timeout=datetime.timedelta(seconds=600)
        )
    else:
        device = torch.device("cpu")
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=600))
    rank, num_ranks = dist.get_rank(), dist.get_world_size()
    group = dist.new_group(list(range(num_ranks)))
    return DistEnv(rank, num_ranks, local_rank, device, group)


def all_gather(env: DistEnv, tensor: torch.Tensor) -> torch.Tensor:
    """[num_ranks, *tensor.shape]: every rank's tensor (same shape on all ranks)."""
    tensor = tensor.contiguous()
    # NCCL has no bool or FP8 reduction types; moving their bytes as uint8 is exact.
    moved = tensor.view(torch.uint8) if tensor.dtype in (torch.bool, FP8_DTYPE) else tensor
    # A flat output: the form every backend takes (gloo refuses a stacked one).
    flat = torch.empty(env.num_ranks * moved.numel(), dtype=moved.dtype, device=moved.device)
    dist.all_gather_into_tensor(flat, moved.reshape(-1), group=env.group)
    out = flat.view(env.num_ranks, *moved.shape)
    return out.view(tensor.dtype) if moved is not tensor else out


def all_ranks_ok(env: DistEnv, ok: bool) -> bool:
    flag = torch.tensor([1 if ok else 0], dtype=torch.int32, device=env.device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=env.group)
    return bool(flag.item())


# ---------------------------------------------------------------- checks


class CheckFailed(AssertionError):
    """A result differs from its reference; the message says what, where and by how much."""


def check(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def _first_positions(mask: torch.Tensor, count: int = 5) -> List[Tuple[int, ...]]:
    return [tuple(int(i) for i in p) for p in mask.nonzero()[:count].tolist()]


def expect_equal(name: str, got: Optional[torch.Tensor], want: torch.Tensor) -> None:
    """Exact: same shape, dtype and bits (for floats, NaN compares equal to NaN)."""
    check(got is not None, f"{name}: got None, expected a tensor of shape {tuple(want.shape)}")
    check(
        tuple(got.shape) == tuple(want.shape),
        f"{name}: shape {tuple(got.shape)}, expected {tuple(want.shape)}",
    )
    check(got.dtype == want.dtype, f"{name}: dtype {got.dtype}, expected {want.dtype}")
    a, b = got.detach().contiguous(), want.detach().to(got.device).contiguous()
    if a.dtype.is_floating_point and a.element_size() in (1, 2, 4, 8):
        # Compare bits, so -0.0 != 0.0 is not hidden and FP8 (no comparison ops) works.
        bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        a, b = a.view(bits), b.view(bits)
    if a.dtype == torch.bool:
        a, b = a.to(torch.uint8), b.to(torch.uint8)
    differs = a != b
    if bool(differs.any()):
        where = _first_positions(differs)
        sample = ", ".join(
            f"{p}: got {got[p].item()!r} expected {want[p].item()!r}"
            for p in where
            if got.dtype != FP8_DTYPE
        )
        raise CheckFailed(
            f"{name}: {int(differs.sum())} of {differs.numel()} elements differ; first at "
            f"{where}" + (f" ({sample})" if sample else "")
        )


def expect_within(
    name: str, got: torch.Tensor, want: torch.Tensor, bound: torch.Tensor
) -> None:
    """Elementwise |got - want| <= bound (float64), no NaN or infinity in got."""
    check(
        tuple(got.shape) == tuple(want.shape),
        f"{name}: shape {tuple(got.shape)}, expected {tuple(want.shape)}",
    )
    g = got.detach().to(torch.float64)
    w = want.detach().to(g.device, torch.float64)
    b = bound.detach().to(g.device, torch.float64)
    bad = ~torch.isfinite(g)
    check(not bool(bad.any()), f"{name}: {int(bad.sum())} NaN/inf elements, first at {_first_positions(bad)}")
    err = (g - w).abs()
    over = err > b
    if bool(over.any()):
        excess = torch.where(over, err - b, torch.zeros_like(err))
        worst = tuple(int(i) for i in torch.unravel_index(excess.argmax(), excess.shape))
        raise CheckFailed(
            f"{name}: {int(over.sum())} of {over.numel()} elements outside the tolerance; "
            f"worst at {worst}: got {g[worst].item():.6g}, expected {w[worst].item():.6g}, "
            f"|diff| {err[worst].item():.3g} > bound {b[worst].item():.3g}"
        )


class Findings:
    """Failed checks of one case, collected instead of raised, so that a rank whose results
    are wrong still makes the same library and collective calls as its peers (raising at
    the first difference would leave them waiting). `with findings.section():` runs checks
    and records the first failure in it; raise_if_any() ends the case."""

    def __init__(self) -> None:
        self.failures: List[str] = []

    @contextlib.contextmanager
    def section(self) -> Iterator[None]:
        try:
            yield
        except CheckFailed as failure:
            self.failures.append(str(failure))

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """Around a whole case: any other error is recorded after the checks that failed
        before it, so raise_if_any() reports both."""
        try:
            yield
        except CheckFailed as failure:
            self.failures.append(str(failure))
        except Exception:
            self.failures.append(traceback.format_exc().rstrip())

    def raise_if_any(self) -> None:
        if self.failures:
            raise CheckFailed("\n    ".join([f"{len(self.failures)} check(s) failed:"] + self.failures))


# ---------------------------------------------------------------- data and references


def make_generator(env: DistEnv, seed: int) -> torch.Generator:
    gen = torch.Generator(device=env.device)
    gen.manual_seed(seed)
    return gen


def random_bf16(shape: Sequence[int], gen: torch.Generator, device: torch.device, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(tuple(shape), generator=gen, device=device) * scale).to(torch.bfloat16)


def random_routing(
    num_tokens: int,
    num_experts: int,
    num_topk: int,
    num_masked: int,
    gen: torch.Generator,
    device: torch.device,
) -> torch.Tensor:
    """[num_tokens, num_topk] int64: distinct experts per token (top-k of random scores),
    then `num_masked` random (token, k) entries set to -1 ("no expert"), and, with more than
    two tokens, every entry of the last token, so one token goes nowhere at all."""
    scores = torch.rand((num_tokens, num_experts), generator=gen, device=device)
    topk_idx = scores.topk(num_topk, dim=1, sorted=False).indices.to(torch.int64)
    if num_tokens * num_topk > 0 and num_masked > 0:
        flat = torch.randint(0, num_tokens * num_topk, (num_masked,), generator=gen, device=device)
        topk_idx.view(-1)[flat] = -1
    if num_tokens > 2:
        topk_idx[-1] = -1
    return topk_idx


def expert_rank(topk_idx: torch.Tensor, num_experts: int, num_ranks: int) -> torch.Tensor:
    """The rank holding each selected expert (experts are spread evenly), -1 where none."""
    per_rank = num_experts // num_ranks
    return torch.where(topk_idx >= 0, topk_idx // per_rank, torch.full_like(topk_idx, -1))


def layout_reference(
    topk_idx: torch.Tensor, num_experts: int, num_ranks: int
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(num_tokens_per_rank [R] int32, num_tokens_per_expert [E] int32,
    is_token_in_rank [T, R] bool), counting a token once per rank."""
    ranks = expert_rank(topk_idx, num_experts, num_ranks)
    is_token_in_rank = torch.stack([(ranks == r).any(dim=1) for r in range(num_ranks)], dim=1)
    num_tokens_per_rank = is_token_in_rank.sum(dim=0).to(torch.int32)
    selected = topk_idx[topk_idx >= 0]
    num_tokens_per_expert = torch.bincount(selected, minlength=num_experts).to(torch.int32)
    return num_tokens_per_rank, num_tokens_per_expert, is_token_in_rank


def quantize_fp8(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Reference FP8 encoding of [rows, hidden] (hidden a multiple of 128): per block of 128
    channels, scale = amax / 448 (1 for an all-zero block) and value = x / scale as e4m3fn,
    rounded to nearest even. Returns (values [rows, hidden] e4m3fn, scales [rows, hidden/128] f32)."""
    rows, hidden = x.shape
    assert hidden % FP8_BLOCK == 0, f"hidden {hidden} is not a multiple of {FP8_BLOCK}"
    blocks = x.float().view(rows, hidden // FP8_BLOCK, FP8_BLOCK)
    amax = blocks.abs().amax(dim=2)
    scales = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
    values = (blocks / scales.unsqueeze(2)).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return values.view(rows, hidden), scales


def dequantize_fp8(values: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """float32 [..., hidden] from e4m3fn values and their per-128-channel scales [..., hidden/128]
    (any strides: the low-latency scales may be column-major)."""
    hidden = values.shape[-1]
    lead = values.shape[:-1]
    blocks = values.float().reshape(*lead, hidden // FP8_BLOCK, FP8_BLOCK)
    return (blocks * scales.float().reshape(*lead, hidden // FP8_BLOCK, 1)).reshape(*lead, hidden)


def fp8_error_bound(x: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """Most an FP8 round trip may move each element of x (float32 [..., hidden]) when its
    blocks' scales are `scales`: the e4m3 rounding (relative, or one subnormal half-step
    times the scale), with 2^-12 of room for how the scale's division was rounded."""
    hidden = x.shape[-1]
    per_channel = scales.float().repeat_interleave(FP8_BLOCK, dim=-1)[..., :hidden]
    slack = 1.0 + 2.0**-12
    return x.float().abs() * FP8_RELATIVE_ERROR * slack + per_channel * FP8_SUBNORMAL_ERROR * slack


def fp8_scale_reference(x: torch.Tensor) -> torch.Tensor:
    """amax / 448 per block of 128 channels of float [..., hidden]."""
    hidden = x.shape[-1]
    amax = x.float().reshape(*x.shape[:-1], hidden // FP8_BLOCK, FP8_BLOCK).abs().amax(dim=-1)
    return torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))


def weighted_row_sum(rows: torch.Tensor, weights: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(sum_k weights[t, k] * rows[t, k, :], sum_k |weights[t, k] * rows[t, k, :]|) in float64,
    for rows [T, K, H] and weights [T, K]: the reference of a weighted combine and the
    magnitude its rounding is measured against."""
    terms = rows.to(torch.float64) * weights.to(torch.float64).unsqueeze(2)
    return terms.sum(dim=1), terms.abs().sum(dim=1)


def bf16_sum_bound(magnitude: torch.Tensor) -> torch.Tensor:
    """Tolerance of a float32 sum rounded once to bfloat16: 2^-8 of the terms' magnitude,
    doubled for the float32 summation order (whose own error is ~2^-24 per term)."""
    return magnitude * (2 * BF16_ROUNDING)


def row_weight_sum(weights: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """sum_k weights[:, k] where keep[:, k], summed column by column in float32 so that every
    rank gets the same bits for the same row, whatever the tensor's row count."""
    total = torch.zeros(weights.shape[0], dtype=torch.float32, device=weights.device)
    for k in range(weights.shape[1]):
        total = total + torch.where(keep[:, k], weights[:, k].float(), torch.zeros_like(total))
    return total


def scale_rows(rows: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """What the tests' stand-in expert computes: bfloat16(rows * factor per row), in float32."""
    return (rows.float() * factors.float().unsqueeze(1)).to(torch.bfloat16)


# ---------------------------------------------------------------- case runner


class Suite:
    """Runs named cases; after each, all ranks agree on pass or fail (an all-reduce), so
    every rank prints the same verdict and a failure on one rank fails the run everywhere.
    A rank's own failure message is printed by that rank, prefixed with its number."""

    def __init__(self, name: str, env: DistEnv):
        self.name = name
        self.env = env
        self.passed: List[str] = []
        self.failed: List[str] = []
        self.notes: List[str] = []

    def say(self, text: str) -> None:
        if self.env.rank == 0:
            print(text, flush=True)

    def note(self, text: str) -> None:
        """Something the run could not check and why; printed at the end as well."""
        if text not in self.notes:
            self.notes.append(text)
            self.say(f"[{self.name}] note: {text}")

    def run(self, case: str, body: Callable[[], None]) -> bool:
        started = time.monotonic()
        ok = True
        try:
            body()
        except Exception as error:  # every failure, also the library's own errors
            ok = False
            detail = (
                str(error) if isinstance(error, CheckFailed) else traceback.format_exc().rstrip()
            )
            print(f"[{self.name}] rank {self.env.rank}: {case}: FAILED: {detail}", flush=True)
        agreed = all_ranks_ok(self.env, ok)
        seconds = time.monotonic() - started
        if agreed:
            self.passed.append(case)
            self.say(f"[{self.name}] {case}: passed ({seconds:.1f} s)")
        else:
            self.failed.append(case)
            self.say(f"[{self.name}] {case}: FAILED (see the rank messages above)")
        return agreed

    def finish(self) -> int:
        self.say(
            f"[{self.name}] {len(self.passed)} passed, {len(self.failed)} failed"
            + (f"; notes: {'; '.join(self.notes)}" if self.notes else "")
        )
        for case in self.failed:
            self.say(f"[{self.name}]   failed: {case}")
        return 0 if not self.failed else 1


def check_graph_replays(env: DistEnv, step: Callable[[], torch.Tensor],
                        load: Callable[[int], None], count: int) -> List[torch.Tensor]:
    """Runs `step` eagerly for inputs 0..count-1 (written in place by load(i);
    these runs also warm up), captures one `step` in a CUDA graph, then
    replays it with inputs written in place (each, in another order, and one
    twice) and checks each replay's result equals the eager one bit for bit.
    Returns the eager results."""
    eager = []
    for i in range(count):
        load(i)
        eager.append(step().clone())
    torch.cuda.synchronize()
    env.barrier()
    graph = torch.cuda.CUDAGraph()
    # thread_local: Courier's proxy threads may use CUDA on their own streams
    # (the copy-engine NIC backend) while this thread captures.
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        captured = step()
    env.barrier()
    for i in list(range(count - 1, -1, -1)) + [count - 1]:
        load(i)
        graph.replay()
        torch.cuda.synchronize()
        expect_equal(f"replay with inputs {i}: combined_x", captured, eager[i])
    return eager


def finish_dist(env: DistEnv) -> None:
    dist.barrier(group=env.group)
    dist.destroy_process_group()


def ensure_ranks_divide(num_experts: int, num_ranks: int) -> int:
    """The experts of a standard shape, rounded down to a multiple of the ranks."""
    experts = (num_experts // num_ranks) * num_ranks
    if experts == 0:
        raise SystemExit(f"{num_experts} experts cannot be spread over {num_ranks} ranks")
    return experts
