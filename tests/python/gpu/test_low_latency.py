"""Low-latency dispatch and combine through `courier.deep_ep`, one process per GPU, checked
against references computed in torch from every rank's inputs.

    torchrun --nproc-per-node 2 tests/python/gpu/test_low_latency.py [--shapes small|standard|all]

Per shape (standard: 128 tokens, hidden 7168, top-8 of 288 experts; small ones for quick
runs), BF16 and FP8 dispatch, with and without return_recv_hook, BF16 combine with and
without zero_copy, and with use_logfmt:

- every local expert receives exactly the (rank, token) pairs routed to it, the rows of one
  source rank together; packed_recv_count is right; BF16 rows are bit for bit the senders',
  FP8 rows carry scales of amax/448 per 128 channels and decode to within e4m3's rounding;
  all copies of one token (at its several experts) decode alike;
- a second dispatch replaces the first one's results (two calls in a row, different data);
- combine returns, per token, sum_k weight_k * (expert k's output row) within one bfloat16
  rounding (with use_logfmt within LogFMT's 2.2% more, and DeepEP's calc_diff bound); the stand-in expert e scales its rows by 1 + (e mod 4) / 4, so a row that comes
  back to the wrong (token, k) shows;
- clean_low_latency_buffer leaves the buffer usable.

The row order inside one (expert, source rank) block is not checked (DeepEP gives none):
each row says where it came from in its first three blocks of 128 channels (source rank + 1,
token / 16 + 1, token % 16 + 1: constant blocks of 1..16, which FP8 carries exactly with
amax / 448 scales and with power-of-two ones alike).

Only DeepEP's public API is used, through `import courier.deep_ep as deep_ep`.
Exit status: 0 when every case passed on every rank, 1 otherwise.
"""

from __future__ import annotations

import argparse
import gc
import sys
from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch

import courier.deep_ep as deep_ep

import common
from common import check, expect_equal, expect_within

MARKER_BLOCKS = 3  # channels [0, 384): source rank + 1, token // 16 + 1, token % 16 + 1
MARKER_BASE = 16  # each marker in 1..16: four significant bits at most, exact in e4m3
MARKER_SPAN = 128


@dataclass(frozen=True)
class Shape:
    num_tokens: int  # tokens this rank dispatches
    max_tokens: int  # num_max_dispatch_tokens_per_rank
    hidden: int
    num_topk: int
    num_experts: int

    def __str__(self) -> str:
        return (
            f"tokens={self.num_tokens} max_tokens={self.max_tokens} hidden={self.hidden} "
            f"topk={self.num_topk} experts={self.num_experts}"
        )


STANDARD = [Shape(128, 128, 7168, 8, 288)]
# Small: fewer tokens than the maximum, top-1, many tokens per expert.
SMALL = [Shape(16, 16, 512, 4, 16), Shape(5, 8, 384, 1, 4), Shape(48, 64, 1024, 8, 8)]


def parse_args(argv: List[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", choices=["small", "standard", "all"], default="all")
    parser.add_argument("--seed", type=int, default=0)
    common.add_dist_args(parser)
    return parser.parse_args(argv)


def expert_factor(global_expert: torch.Tensor) -> torch.Tensor:
    """The stand-in expert's output scale: 1, 1.25, 1.5 or 1.75 (exact in float32)."""
    return 1.0 + (global_expert % 4).to(torch.float32) / 4.0


def make_x(env, shape: Shape, gen: torch.Generator) -> torch.Tensor:
    x = common.random_bf16((shape.num_tokens, shape.hidden), gen, env.device, scale=0.1)
    tokens = torch.arange(shape.num_tokens, device=env.device)
    markers = [torch.full_like(tokens, env.rank + 1), tokens // MARKER_BASE + 1,
               tokens % MARKER_BASE + 1]
    for block, value in enumerate(markers):
        x[:, block * MARKER_SPAN:(block + 1) * MARKER_SPAN] = value.to(torch.bfloat16).unsqueeze(1)
    return x


def decode_markers(rows: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(source rank, token) of received rows (float32 [N, hidden]); raises if a marker block is
    not one constant integer, i.e. the row is not a whole row of some sender."""
    values = []
    for block in range(MARKER_BLOCKS):
        part = rows[:, block * MARKER_SPAN:(block + 1) * MARKER_SPAN]
        value = part[:, :1].round()
        off = (part - value).abs().amax(dim=1) if part.numel() else part.new_zeros(0)
        bad = off > 1e-3
        if bool(bad.any()):
            raise common.CheckFailed(
                f"received row {int(bad.nonzero()[0])} is not a sender's row: its marker block "
                f"{block} is not one integer (max deviation {float(off.max()):.4g})")
        values.append(value.squeeze(1).to(torch.int64) - 1)
    source, high, low = values
    return source, high * MARKER_BASE + low


class Inputs:
    def __init__(self, env, shape: Shape, seed: int, salt: int):
        gen = common.make_generator(env, seed * 7919 + env.rank + 104729 * salt)
        self.x = make_x(env, shape, gen)
        self.topk_idx = common.random_routing(
            shape.num_tokens, shape.num_experts, shape.num_topk,
            min(10, shape.num_tokens * shape.num_topk // 4), gen, env.device,
        )
        self.topk_weights = torch.rand((shape.num_tokens, shape.num_topk), generator=gen, device=env.device) + 0.05


class Expected:
    def __init__(self, env, shape: Shape, inputs: Inputs):
        R, me = env.num_ranks, env.rank
        L = shape.num_experts // R
        self.x_all = common.all_gather(env, inputs.x)  # [R, T, H]
        idx_all = common.all_gather(env, inputs.topk_idx)  # [R, T, K]
        T = shape.num_tokens
        # Sorted keys (local expert, source, token) of every pair routed to this rank.
        keys, counts = [], []
        for i in range(L):
            e = me * L + i
            n = 0
            for s in range(R):
                tokens = (idx_all[s] == e).any(dim=1).nonzero().squeeze(1)
                keys.append(i * R * T + s * T + tokens)
                n += int(tokens.numel())
            counts.append(n)
        self.keys = torch.cat(keys) if keys else torch.zeros(0, dtype=torch.int64, device=env.device)
        self.counts = torch.tensor(counts, dtype=torch.int32, device=env.device)


def calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    """DeepEP's tests/utils.py measure: 1 - 2 sum(x y) / sum(x^2 + y^2) over x + 1, y + 1."""
    x, y = x.double() + 1, y.double() + 1
    return float(1 - 2 * (x * y).sum() / (x * x + y * y).sum())


def run_case(env, suite, buffer, shape: Shape, fp8: bool, hook: bool, seed: int,
             side_stream: bool = False) -> None:
    found = common.Findings()
    with found.guard():
        _run_case_body(found, env, suite, buffer, shape, fp8, hook, seed, side_stream)
    found.raise_if_any()


# GPU cycles a side stream sleeps before it writes a dispatch's x (tens of
# milliseconds): the call is made while its input is still being produced.
SIDE_STREAM_SLEEP_CYCLES = 50_000_000


def _run_case_body(found, env, suite, buffer, shape: Shape, fp8: bool, hook: bool, seed: int,
                   side_stream: bool = False) -> None:
    R, me, T, H = env.num_ranks, env.rank, shape.num_tokens, shape.hidden
    L = shape.num_experts // R
    slots = R * shape.max_tokens
    # Two dispatches in a row: the first one's data must not show in the second's results.
    earlier = Inputs(env, shape, seed, salt=1)
    inputs = Inputs(env, shape, seed, salt=2)
    exp = Expected(env, shape, inputs)

    # FP8 through the hook also rounds the scales to powers of two (DeepEP's round_scale)
    # and takes them as UE8M0 (exponent bytes, four per int32), decoded here for the checks.
    round_scale = fp8 and hook

    def call(x, topk_idx):
        return buffer.low_latency_dispatch(
            x, topk_idx, shape.max_tokens, shape.num_experts,
            use_fp8=fp8, async_finish=not hook, return_recv_hook=hook, round_scale=round_scale,
            use_ue8m0=round_scale,
        )

    def dispatch(x, topk_idx):
        if side_stream:
            # x is written on another stream, behind a long sleep, and the call made on that
            # stream right away, with no host synchronization: the dispatch must read the
            # new x, not the zeros it held before.
            side = torch.cuda.Stream()
            fresh = torch.zeros_like(x)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                torch.cuda._sleep(SIDE_STREAM_SLEEP_CYCLES)
                fresh.copy_(x)
                recv, count, handle, event, recv_hook = call(fresh, topk_idx)
            torch.cuda.current_stream().wait_stream(side)
        else:
            recv, count, handle, event, recv_hook = call(x, topk_idx)
        if hook:
            check(callable(recv_hook), "return_recv_hook=True returned no callable hook")
            recv_hook()
        else:
            event.current_stream_wait()
        if round_scale:
            values, packed = recv
            packs = (H + 511) // 512
            check(packed.dtype == torch.int32 and tuple(packed.shape) == (L, slots, packs),
                  f"use_ue8m0=True scales: {packed.dtype} {tuple(packed.shape)}, expected "
                  f"{(L, slots, packs)} int32")
            # Row-major first: with one int32 per row the column-major tensor already
            # counts as contiguous, and its last stride is not 1.
            row_major = torch.empty(packed.shape, dtype=packed.dtype, device=packed.device)
            row_major.copy_(packed)
            exponents = row_major.view(torch.uint8)[..., : H // 128].to(torch.int32)
            recv = (values, (exponents << 23).view(torch.float32))
        return recv, count, handle

    dispatch(earlier.x, earlier.topk_idx)
    recv, count, handle = dispatch(inputs.x, inputs.topk_idx)
    # What the checks of the received rows produce for the collective steps after them:
    # the stand-in experts' outputs and this rank's decoded copy of each (source, token).
    expert_out = torch.zeros((L, slots, H), dtype=torch.bfloat16, device=env.device)
    table = torch.zeros((R, T, H), dtype=torch.float32, device=env.device)
    have = torch.zeros((R, T), dtype=torch.bool, device=env.device)
    with found.section():
        check_received(env, shape, fp8, recv, count, exp, expert_out, table, have, round_scale)
    if round_scale:
        with found.section():
            valid = (torch.arange(R * shape.max_tokens, device=env.device).unsqueeze(0)
                     < count.unsqueeze(1).to(torch.int64))
            mantissa, _ = torch.frexp(recv[1][valid])
            check(bool((mantissa == 0.5).all()), "round_scale=True: a scale is not a power of two")

    # Every token's copies decode alike, at every rank.
    tables = common.all_gather(env, table)  # [receiver, source, T, H]
    haves = common.all_gather(env, have)
    own = torch.zeros((T, H), dtype=torch.float32, device=env.device)
    own_have = torch.zeros(T, dtype=torch.bool, device=env.device)
    with found.section():
        for d in range(R):
            mine, mine_have = tables[d][me], haves[d][me]
            both = own_have & mine_have
            if bool(both.any()):
                expect_equal(f"token copies decoded at rank {d} vs lower ranks", mine[both], own[both])
            own = torch.where(mine_have.unsqueeze(1), mine, own)
            own_have |= mine_have
        routed = inputs.topk_idx >= 0
        check(bool(own_have[routed.any(dim=1)].all()),
              "a token of this rank routed to some expert arrived nowhere")

    # Reference: sum_k w_k * expert_{e_k}(x_hat), from this rank's tokens as they arrived.
    routed = inputs.topk_idx >= 0
    x_hat = own.to(torch.bfloat16)
    terms = torch.stack(
        [common.scale_rows(x_hat, expert_factor(inputs.topk_idx[:, k].clamp(min=0)))
         for k in range(shape.num_topk)],
        dim=1,
    )  # [T, K, H]
    weights = torch.where(routed, inputs.topk_weights, torch.zeros_like(inputs.topk_weights))
    ref, magnitude = common.weighted_row_sum(terms, weights)
    bound = common.bf16_sum_bound(magnitude)

    def combine(**options):
        # One combine, finished through the hook or the returned event.
        combined, event, recv_hook = buffer.low_latency_combine(
            expert_out, inputs.topk_idx, inputs.topk_weights, handle,
            async_finish=not hook, return_recv_hook=hook, **options,
        )
        if hook:
            check(callable(recv_hook), "low_latency_combine(return_recv_hook=True) returned no hook")
            recv_hook()
        else:
            event.current_stream_wait()
        return combined

    for zero_copy in (False, True):
        if zero_copy and hasattr(buffer, "get_next_low_latency_combine_buffer"):
            buffer.get_next_low_latency_combine_buffer(handle)[:, :, :] = expert_out
        combined = combine(zero_copy=zero_copy)
        with found.section():
            check(combined.dtype == torch.bfloat16 and tuple(combined.shape) == (T, H),
                  f"combined_x: {tuple(combined.shape)} {combined.dtype}, expected {(T, H)} bfloat16")
            expect_within(f"combined_x (zero_copy={zero_copy})", combined, ref, bound)

    # use_logfmt (without zero_copy, as DeepEP's test runs it): the stand-in outputs'
    # random blocks (below 1) travel LogFMT-coded, the marker blocks stay bfloat16. Within
    # DeepEP's own bound (calc_diff < 1e-5 after a BF16 dispatch, 9e-4 after FP8), and per
    # value within LogFMT's rounding, 2^(step / 2) - 1 <= 2.2% of the terms' magnitude (a
    # level step of at most 32 / 510 in log2), plus the bfloat16 sum's.
    combined = combine(use_logfmt=True)
    with found.section():
        check(combined.dtype == torch.bfloat16 and tuple(combined.shape) == (T, H),
              f"combined_x (use_logfmt): {tuple(combined.shape)} {combined.dtype}")
        expect_within("combined_x (use_logfmt)", combined, ref, bound + 0.022 * magnitude)
        diff = calc_diff(ref, combined)
        limit = 9e-4 if fp8 else 1e-5
        check(diff < limit, f"combined_x (use_logfmt): calc_diff {diff:.2e}, DeepEP's bound {limit}")


def check_received(env, shape, fp8, recv, count, exp, expert_out, table, have,
                   round_scale: bool = False) -> None:
    """Checks one dispatch's outputs; fills expert_out (the stand-in experts' outputs), table
    and have (the decoded rows by source and token) for the steps after it."""
    R, me, T, H = env.num_ranks, env.rank, shape.num_tokens, shape.hidden
    L = shape.num_experts // R
    slots = R * shape.max_tokens
    if fp8:
        check(isinstance(recv, tuple) and len(recv) == 2,
              f"use_fp8=True must return (values, scales), got {type(recv)}")
        values, scales = recv
        check(values.dtype == common.FP8_DTYPE, f"packed_recv_x dtype {values.dtype}, expected float8_e4m3fn")
        check(tuple(scales.shape) == (L, slots, H // 128) and scales.dtype == torch.float32,
              f"packed_recv_x scales: {tuple(scales.shape)} {scales.dtype}, expected {(L, slots, H // 128)} float32")
    else:
        check(isinstance(recv, torch.Tensor), f"use_fp8=False must return a tensor, got {type(recv)}")
        values, scales = recv, None
        check(values.dtype == torch.bfloat16, f"packed_recv_x dtype {values.dtype}, expected bfloat16")
    check(tuple(values.shape) == (L, slots, H),
          f"packed_recv_x shape {tuple(values.shape)}, expected {(L, slots, H)}")
    expect_equal("packed_recv_count", count, exp.counts)

    # The valid rows, expert by expert, decoded.
    valid = torch.arange(slots, device=env.device).unsqueeze(0) < exp.counts.unsqueeze(1).to(torch.int64)
    expert_of_row = torch.arange(L, device=env.device).unsqueeze(1).expand(L, slots)[valid]
    rows_q = values[valid]
    rows = common.dequantize_fp8(rows_q, scales[valid]) if fp8 else rows_q.float()
    source, token = decode_markers(rows)
    check(bool(((source >= 0) & (source < R) & (token >= 0) & (token < T)).all()),
          "a received row names a source rank or token that does not exist")
    got_keys = expert_of_row * R * T + source * T + token
    sorted_keys, _ = got_keys.sort()
    if not torch.equal(sorted_keys, exp.keys):
        missing = exp.keys[~torch.isin(exp.keys, sorted_keys)][:5].tolist()
        extra = sorted_keys[~torch.isin(sorted_keys, exp.keys)][:5].tolist()
        raise common.CheckFailed(
            f"received (expert, source, token) pairs differ from the routing: {len(got_keys)} rows, "
            f"expected {len(exp.keys)}; missing keys {missing}, unexpected {extra} "
            f"(key = local_expert * {R * T} + source * {T} + token)"
        )
    # One source rank's rows form one block per expert (as the layout ranges describe).
    group = expert_of_row * R + source
    changes = int((group[1:] != group[:-1]).sum()) if group.numel() > 1 else 0
    blocks = int(torch.unique(group).numel())
    check(changes == max(blocks - 1, 0),
          f"rows of one (expert, source rank) are not contiguous: {blocks} blocks, {changes + 1} runs")

    want = exp.x_all[source, token]  # [N, H] bf16
    if fp8:
        expected_scales = common.fp8_scale_reference(want)
        if round_scale:  # DeepEP's round_scale: 2^ceil(log2(amax / 448))
            expected_scales = torch.exp2(torch.ceil(torch.log2(expected_scales)))
        expect_within("FP8 scales", scales[valid], expected_scales, expected_scales * 2.0**-20)
        expect_within("FP8 rows (decoded)", rows, want.float(), common.fp8_error_bound(want, scales[valid]))
    else:
        expect_equal("packed_recv_x rows", rows_q, want)

    table[source, token] = rows
    have[source, token] = True
    expect_equal("copies of one token at several local experts", table[source, token], rows)
    # The stand-in experts' outputs (rows past the counts stay zero).
    global_expert = me * L + torch.arange(L, device=env.device)
    factors = expert_factor(global_expert).unsqueeze(1).expand(L, slots)
    expert_out[valid] = common.scale_rows(rows.to(torch.bfloat16), factors[valid])


def run_graph_case(env, buffer, shape: Shape, fp8: bool, hook: bool, seed: int) -> None:
    """A decode step under a CUDA graph, as frameworks run low-latency mode:
    dispatch, a stand-in expert (each local expert scales its rows by its
    own factor), combine, captured once and replayed with new x, topk_idx and
    topk_weights written in place; each replay's combined_x equals, bit for
    bit, an eager step of the same inputs on the same Buffer."""
    R, T, H = env.num_ranks, shape.num_tokens, shape.hidden
    L = shape.num_experts // R
    factors = expert_factor(env.rank * L + torch.arange(L, device=env.device)).view(L, 1, 1)
    x = torch.zeros((T, H), dtype=torch.bfloat16, device=env.device)
    topk_idx = torch.full((T, shape.num_topk), -1, dtype=torch.int64, device=env.device)
    topk_weights = torch.zeros((T, shape.num_topk), dtype=torch.float32, device=env.device)

    def step() -> torch.Tensor:
        recv, _, handle, _, recv_hook = buffer.low_latency_dispatch(
            x, topk_idx, shape.max_tokens, shape.num_experts, use_fp8=fp8, round_scale=fp8,
            return_recv_hook=hook)
        if hook:
            recv_hook()
        if fp8:
            values, scales = recv
            rows = values.float() * scales.repeat_interleave(128, dim=2)
        else:
            rows = recv.float()
        expert_out = (rows * factors).to(torch.bfloat16)
        combined, _, combine_hook = buffer.low_latency_combine(
            expert_out, topk_idx, topk_weights, handle, return_recv_hook=hook)
        if hook:
            combine_hook()
        return combined

    steps = [Inputs(env, shape, seed, salt=20 + i) for i in range(3)]

    def load(inputs: Inputs) -> None:
        x.copy_(inputs.x)
        topk_idx.copy_(inputs.topk_idx)
        topk_weights.copy_(inputs.topk_weights)

    # The eager runs also warm up: the outputs are made once per shape.
    eager = common.check_graph_replays(env, step, lambda i: load(steps[i]), len(steps))
    # Eager calls go on after the replays.
    load(steps[0])
    expect_equal("an eager step after the replays: combined_x", step(), eager[0])
    torch.cuda.synchronize()
    env.barrier()


def expect_identity_combined(name: str, combined: torch.Tensor, inputs: Inputs) -> None:
    """With identity experts each token comes back as its own row times the sum of its
    routed weights (within bfloat16's rounding of the sum)."""
    weights = torch.where(inputs.topk_idx >= 0, inputs.topk_weights,
                          torch.zeros_like(inputs.topk_weights)).sum(dim=1, keepdim=True)
    want = inputs.x.float() * weights
    expect_within(name, combined.float(), want, want.abs() * 2.0**-6 + 1e-3)


def run_overlap_case(env, buffer, shape: Shape, seed: int) -> None:
    """async_finish=True: the dispatch goes to the Buffer's comm stream
    (get_comm_stream) behind the caller's stream, and returns while its
    kernels have not run (the caller's stream is held by a long sleep, so the
    returned event cannot have completed: a state, not a time); the caller's
    stream is not blocked by it; the event, waited for, orders the next
    kernel after the received rows. The same for the combine."""
    R, T, H = env.num_ranks, shape.num_tokens, shape.hidden
    L = shape.num_experts // R
    inputs = Inputs(env, shape, seed, salt=30)
    exp = Expected(env, shape, inputs)
    comm = buffer.get_comm_stream()
    check(isinstance(comm, torch.cuda.Stream) and comm != torch.cuda.current_stream(),
          "get_comm_stream() is not a stream of its own")
    env.barrier()
    torch.cuda._sleep(SIDE_STREAM_SLEEP_CYCLES)  # holds the caller's stream
    recv, count, handle, event, _ = buffer.low_latency_dispatch(
        inputs.x, inputs.topk_idx, shape.max_tokens, shape.num_experts, use_fp8=False,
        async_finish=True)
    check(event.event is not None and not event.event.query(),
          "low_latency_dispatch(async_finish=True) returned with its event complete while the "
          "caller's stream was still held: it ran on the caller's stream or waited")
    event.current_stream_wait()
    got_count = count.clone()  # ordered after the dispatch by the event
    expect_equal("packed_recv_count (after the event)", got_count, exp.counts)
    expert_out = torch.zeros((L, R * shape.max_tokens, H), dtype=torch.bfloat16, device=env.device)
    valid = (torch.arange(R * shape.max_tokens, device=env.device).unsqueeze(0)
             < got_count.unsqueeze(1).to(torch.int64))
    expert_out[valid] = recv[valid]
    torch.cuda._sleep(SIDE_STREAM_SLEEP_CYCLES)
    combined, event, _ = buffer.low_latency_combine(
        expert_out, inputs.topk_idx, inputs.topk_weights, handle, async_finish=True)
    check(event.event is not None and not event.event.query(),
          "low_latency_combine(async_finish=True) returned with its event complete while the "
          "caller's stream was still held")
    event.current_stream_wait()
    expect_identity_combined("combined_x (after the event)", combined, inputs)
    torch.cuda.synchronize()
    env.barrier()


TWO_STREAMS_ROUNDS = 20


def run_two_streams_case(env, buffers, shape: Shape, seed: int) -> None:
    """Two Buffers, each called on a stream of its own with no order between the
    streams, so their dispatches and combines may run on the GPU at the same time,
    with no host synchronization between the calls. Every call has inputs of its
    own, so a result that took another Buffer's or an earlier round's data shows.
    Identity experts (expect_identity_combined)."""
    L = shape.num_experts // env.num_ranks
    slots = env.num_ranks * shape.max_tokens
    rounds = [[Inputs(env, shape, seed, salt=40 + len(buffers) * r + i)
               for i in range(len(buffers))] for r in range(TWO_STREAMS_ROUNDS)]
    streams = [torch.cuda.Stream() for _ in buffers]
    for stream in streams:  # the inputs were made on the current stream
        stream.wait_stream(torch.cuda.current_stream())
    slot = torch.arange(slots, device=env.device).view(1, slots, 1)
    results = []
    for inputs in rounds:
        handles = []
        for buffer, stream, given in zip(buffers, streams, inputs):
            with torch.cuda.stream(stream):
                recv, count, handle, _, _ = buffer.low_latency_dispatch(
                    given.x, given.topk_idx, shape.max_tokens, shape.num_experts, use_fp8=False)
                # No boolean indexing: it would wait for the stream on the host.
                valid = slot < count.view(L, 1, 1).to(torch.int64)
                handles.append((torch.where(valid, recv, torch.zeros_like(recv)), handle))
        combined = []
        for buffer, stream, given, (expert_out, handle) in zip(buffers, streams, inputs, handles):
            with torch.cuda.stream(stream):
                combined.append(buffer.low_latency_combine(
                    expert_out, given.topk_idx, given.topk_weights, handle)[0])
        results.append(combined)
    for stream in streams:
        torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    for r, (inputs, combined) in enumerate(zip(rounds, results)):
        for i, (given, got) in enumerate(zip(inputs, combined)):
            expect_identity_combined(f"Buffer {i}, round {r}: combined_x", got, given)
    env.barrier()


def run_shape(env, suite, shape: Shape, args) -> None:
    experts = common.ensure_ranks_divide(shape.num_experts, env.num_ranks)
    shape = Shape(shape.num_tokens, shape.max_tokens, shape.hidden, shape.num_topk, experts)
    check(env.num_ranks < MARKER_BASE and shape.num_tokens <= MARKER_BASE * MARKER_BASE,
          f"the markers hold fewer than {MARKER_BASE} ranks and at most "
          f"{MARKER_BASE * MARKER_BASE} tokens")
    check(shape.hidden % 128 == 0 and shape.hidden >= MARKER_BLOCKS * MARKER_SPAN,
          f"hidden {shape.hidden}: the test needs a multiple of 128 of at least {MARKER_BLOCKS * MARKER_SPAN}")
    suite.say(f"[low_latency] shape: {shape}, ranks={env.num_ranks}")
    num_rdma_bytes = deep_ep.Buffer.get_low_latency_rdma_size_hint(
        shape.max_tokens, shape.hidden, env.num_ranks, shape.num_experts
    )
    suite.say(f"[low_latency] num_rdma_bytes from the size hint: {num_rdma_bytes / 1e6:.1f} MB")

    def make_buffer():
        return deep_ep.Buffer(
            env.group, 0, num_rdma_bytes, low_latency_mode=True,
            num_qps_per_rank=shape.num_experts // env.num_ranks,
        )

    buffer = make_buffer()
    if not hasattr(buffer, "get_next_low_latency_combine_buffer"):
        suite.note("no get_next_low_latency_combine_buffer: zero_copy combines pass x itself")
    for fp8 in (False, True):
        for hook in (False, True):
            name = f"{shape}: {'FP8' if fp8 else 'BF16'} dispatch, BF16 combine, return_recv_hook={hook}"
            suite.run(name, lambda: run_case(env, suite, buffer, shape, fp8, hook, args.seed))

    def clean_then_dispatch():
        buffer.clean_low_latency_buffer(shape.max_tokens, shape.hidden, shape.num_experts)
        env.barrier()
        run_case(env, suite, buffer, shape, False, False, args.seed + 1)

    suite.run(f"{shape}: clean_low_latency_buffer, then dispatch and combine", clean_then_dispatch)
    for hook in (False, True):
        suite.run(f"{shape}: x written on a side stream behind a sleep, dispatched there at once, "
                  f"return_recv_hook={hook}",
                  lambda: run_case(env, suite, buffer, shape, False, hook, args.seed + 2,
                                   side_stream=True))
    suite.run(f"{shape}: async_finish on the comm stream: returns before its kernels ran, the "
              "event orders the next kernel", lambda: run_overlap_case(env, buffer, shape,
                                                                       args.seed + 4))
    # CUDA graphs, on either path (their targets come from device epoch words).
    for fp8, hook in ((False, False), (True, True)):
        suite.run(f"{shape}: dispatch, stand-in expert and combine captured in a CUDA graph, "
                  f"replayed with new inputs ({'FP8' if fp8 else 'BF16'}, "
                  f"return_recv_hook={hook}, {buffer.transport} path)",
                  lambda: run_graph_case(env, buffer, shape, fp8, hook, args.seed + 3))
    # A second Buffer beside the first, both called at once on two streams.
    second = make_buffer()
    suite.run(f"{shape}: two Buffers called at once on two streams, {TWO_STREAMS_ROUNDS} rounds "
              f"({buffer.transport} path)",
              lambda: run_two_streams_case(env, [buffer, second], shape, args.seed + 5))
    del buffer, second
    gc.collect()
    env.barrier()


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    env = common.init_dist(args.backend, args.device)
    suite = common.Suite("low_latency", env)
    shapes = {"small": SMALL, "standard": STANDARD, "all": SMALL + STANDARD}[args.shapes]
    for shape in shapes:
        run_shape(env, suite, shape, args)
    status = suite.finish()
    common.finish_dist(env)
    return status


if __name__ == "__main__":
    sys.exit(main())
