"""High-throughput (intranode) dispatch and combine through `courier.deep_ep`, one process per
GPU, checked against references computed in torch from every rank's inputs.

    torchrun --nproc-per-node 2 tests/python/gpu/test_intranode.py [--shapes small|standard|all]

What it checks, per shape (standard: 4096 tokens, hidden 7168, top-8 of 256 experts; small
ones for quick runs), for BF16 and FP8 inputs, with and without top-k, synchronous and with
async_finish / previous_event / allocate_on_comm_stream:

- get_dispatch_layout: tokens per rank, per expert and is_token_in_rank equal the reference;
- dispatch: this rank receives exactly the rows the other ranks route to it (source rank
  order, token order within a source), bit for bit, FP8 values and scales included; the
  top-k indices are the local expert ids (-1 where the expert lives elsewhere) and the
  weights of the local ones are the senders'; the per-expert counts are right;
- a cached dispatch (the handle of an earlier one) receives the same rows;
- num_worst_tokens pads the outputs to that many rows: the received rows first, unchanged,
  then rows with top-k index -1;
- combine returns, per token, the sum of what its ranks sent back (here each rank sends the
  row scaled by the sum of the token's weights on that rank, so the result is the weighted
  sum), within one bfloat16 rounding; combined top-k weights equal the dispatched ones.

Only DeepEP's public API is used, through `import courier.deep_ep as deep_ep`.
Exit status: 0 when every case passed on every rank, 1 otherwise.
"""

from __future__ import annotations

import argparse
import gc
import sys
from dataclasses import dataclass
from typing import List, Optional

import torch

import courier.deep_ep as deep_ep

import common
from common import check, expect_equal, expect_within


@dataclass(frozen=True)
class Shape:
    num_tokens: int
    hidden: int
    num_topk: int
    num_experts: int

    def __str__(self) -> str:
        return (
            f"tokens={self.num_tokens} hidden={self.hidden} topk={self.num_topk} "
            f"experts={self.num_experts}"
        )


STANDARD = [Shape(4096, 7168, 8, 256)]
# Small ones run in seconds: an odd token count, top-1, and few experts, so some ranks get
# no token from some peers.
SMALL = [Shape(64, 256, 4, 16), Shape(37, 512, 8, 32), Shape(5, 128, 1, 4)]
NUM_SMS = 24


@dataclass(frozen=True)
class Mode:
    async_finish: bool
    previous_event: bool
    allocate_on_comm_stream: bool
    explicit_config: bool

    def __str__(self) -> str:
        return (
            f"async={int(self.async_finish)} previous={int(self.previous_event)} "
            f"comm_alloc={int(self.allocate_on_comm_stream)} config={'explicit' if self.explicit_config else 'default'}"
        )


MODES = [
    Mode(False, False, False, False),
    Mode(True, False, False, True),
    Mode(False, True, False, True),
    # DeepEP asks for previous_event when tensors are allocated on the communication stream.
    Mode(True, True, True, False),
]


def parse_args(argv: List[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", choices=["small", "standard", "all"], default="all")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--num-nvl-bytes",
        type=int,
        default=0,
        help="Buffer's num_nvl_bytes (default: 1e9, or more if the shape needs it)",
    )
    common.add_dist_args(parser)
    return parser.parse_args(argv)


def nvl_bytes_for(shape: Shape, num_ranks: int, requested: int) -> int:
    if requested > 0:
        return requested
    # Room for every peer's rows with their top-k metadata and FP8 scales, twice over
    # (double-buffered calls); at least the 1e9 bytes the field's tests use.
    row = shape.hidden * 2 + shape.num_topk * 12 + shape.hidden // 128 * 4 + 64
    return max(int(1e9), 2 * num_ranks * shape.num_tokens * row)


class Expected:
    """What this rank must receive and get back, computed from every rank's inputs."""

    def __init__(self, env: common.DistEnv, shape: Shape, inputs: "Inputs"):
        R, me = env.num_ranks, env.rank
        per = shape.num_experts // R
        self.num_local_experts = per
        x_all = common.all_gather(env, inputs.x)
        fp8_all = common.all_gather(env, inputs.x_fp8)
        scales_all = common.all_gather(env, inputs.x_scales)
        idx_all = common.all_gather(env, inputs.topk_idx)
        w_all = common.all_gather(env, inputs.topk_weights)
        layouts = [common.layout_reference(idx_all[s], shape.num_experts, R) for s in range(R)]
        self.num_tokens_per_rank, self.num_tokens_per_expert, self.is_token_in_rank = layouts[me]
        # Received rows: grouped by source rank in rank order, token order within a source.
        picks = [layouts[s][2][:, me] for s in range(R)]
        self.recv_x = torch.cat([x_all[s][picks[s]] for s in range(R)])
        self.recv_fp8 = torch.cat([fp8_all[s][picks[s]] for s in range(R)])
        self.recv_scales = torch.cat([scales_all[s][picks[s]] for s in range(R)])
        idx = torch.cat([idx_all[s][picks[s]] for s in range(R)])
        local = (idx >= me * per) & (idx < (me + 1) * per)
        self.recv_topk_idx = torch.where(local, idx - me * per, torch.full_like(idx, -1))
        self.recv_topk_weights = torch.cat([w_all[s][picks[s]] for s in range(R)])
        self.recv_local = local
        self.recv_count_per_expert = [
            int(sum(int((idx_all[s] == me * per + i).sum()) for s in range(R))) for i in range(per)
        ]
        self.num_recv = int(self.recv_x.shape[0])


class Inputs:
    def __init__(self, env: common.DistEnv, shape: Shape, seed: int):
        gen = common.make_generator(env, seed * 7919 + env.rank)
        T = shape.num_tokens
        self.x = common.random_bf16((T, shape.hidden), gen, env.device)
        self.topk_idx = common.random_routing(
            T, shape.num_experts, shape.num_topk, max(1, T * shape.num_topk // 64), gen, env.device
        )
        self.topk_weights = torch.randn((T, shape.num_topk), generator=gen, device=env.device)
        self.x_fp8, self.x_scales = common.quantize_fp8(self.x)


def combine_reference(env, shape, inputs, x_hat, with_topk):
    """Per token of this rank: the sum over the ranks it went to of what that rank's stand-in
    expert sends back (the row times the sum of the token's weights there, or the row), and
    the magnitude of the terms for the rounding bound."""
    ranks = common.expert_rank(inputs.topk_idx, shape.num_experts, env.num_ranks)
    in_rank = torch.stack([(ranks == d).any(dim=1) for d in range(env.num_ranks)], dim=1)
    terms = []
    for d in range(env.num_ranks):
        if with_topk:
            factor = common.row_weight_sum(inputs.topk_weights, ranks == d)
        else:
            factor = torch.ones(shape.num_tokens, device=env.device)
        terms.append(common.scale_rows(x_hat, factor))
    rows = torch.stack(terms, dim=1)  # [T, R, H]
    return common.weighted_row_sum(rows, in_rank.to(torch.float32))


def unpack_recv_x(recv_x, fp8: bool):
    if fp8:
        check(isinstance(recv_x, tuple) and len(recv_x) == 2,
              f"recv_x: FP8 dispatch must return a (values, scales) tuple, got {type(recv_x)}")
        return recv_x[0], recv_x[1]
    check(isinstance(recv_x, torch.Tensor),
          f"recv_x: BF16 dispatch must return a tensor, got {type(recv_x)}")
    return recv_x, None


def check_received(tag: str, exp: Expected, fp8: bool, values, scales, rows: int) -> None:
    if fp8:
        expect_equal(f"{tag} recv_x values", values[:rows], exp.recv_fp8)
        expect_equal(f"{tag} recv_x scales", scales[:rows], exp.recv_scales)
    else:
        expect_equal(f"{tag} recv_x", values[:rows], exp.recv_x)


def run_variant(env, suite, buffer, shape, inputs, exp, fp8: bool, with_topk: bool, mode: Mode) -> None:
    found = common.Findings()
    with found.guard():
        _run_variant_body(found, env, suite, buffer, shape, inputs, exp, fp8, with_topk, mode)
    found.raise_if_any()


def _run_variant_body(found, env, suite, buffer, shape, inputs, exp, fp8: bool, with_topk: bool, mode: Mode):
    R = env.num_ranks
    x_in = (inputs.x_fp8, inputs.x_scales) if fp8 else inputs.x
    dispatch_config = deep_ep.Config(NUM_SMS, 8, 256) if mode.explicit_config else None
    combine_config = deep_ep.Buffer.get_combine_config(R) if mode.explicit_config else None

    def extras():
        out = {"async_finish": mode.async_finish}
        if mode.previous_event:
            out["previous_event"] = buffer.capture()
        if mode.allocate_on_comm_stream:
            out["allocate_on_comm_stream"] = True
        return out

    def finish(event):
        if mode.async_finish:
            event.current_stream_wait()

    args = dict(
        x=x_in,
        num_tokens_per_rank=exp.num_tokens_per_rank,
        is_token_in_rank=exp.is_token_in_rank,
        num_tokens_per_expert=exp.num_tokens_per_expert,
        config=dispatch_config,
    )
    if with_topk:
        args.update(topk_idx=inputs.topk_idx, topk_weights=inputs.topk_weights)
    recv_x, recv_idx, recv_w, counts, handle, event = buffer.dispatch(**args, **extras())
    finish(event)
    values, scales = unpack_recv_x(recv_x, fp8)
    check(handle is not None, "dispatch returned no handle")
    received = int(values.shape[0])
    with found.section():
        check(received == exp.num_recv,
              f"recv_x has {received} rows, expected {exp.num_recv} (the peers' tokens for rank {env.rank})")
        check_received("dispatch", exp, fp8, values, scales, exp.num_recv)
    with found.section():
        check(list(counts) == exp.recv_count_per_expert,
              f"num_recv_tokens_per_expert_list {list(counts)}, expected {exp.recv_count_per_expert}")
    if with_topk:
        check(recv_idx is not None and recv_w is not None, "dispatch with topk_idx returned no top-k outputs")
        local = recv_idx >= 0
        with found.section():
            expect_equal("recv_topk_idx", recv_idx, exp.recv_topk_idx)
        with found.section():
            check(recv_w.dtype == torch.float32, f"recv_topk_weights: dtype {recv_w.dtype}, expected float32")
            check(tuple(recv_w.shape) == tuple(exp.recv_topk_weights.shape),
                  f"recv_topk_weights shape {tuple(recv_w.shape)}, expected {tuple(exp.recv_topk_weights.shape)}")
            # The weights of the experts on this rank are the senders'; what stands where
            # the expert lives elsewhere is not specified (index -1 says to ignore it).
            expect_equal("recv_topk_weights (local experts)", recv_w[exp.recv_local],
                         exp.recv_topk_weights[exp.recv_local])
        local_weights = torch.where(local, recv_w.float(), torch.zeros_like(recv_w, dtype=torch.float32))
        # The stand-in expert: each received row times the sum of its local weights.
        factor = common.row_weight_sum(recv_w, local)
    else:
        with found.section():
            check(recv_idx is None and recv_w is None, "dispatch without topk_idx returned top-k outputs")
        local_weights = None
        factor = torch.ones(received, device=env.device)
    x_hat = common.dequantize_fp8(values, scales).to(torch.bfloat16) if fp8 else values
    expert_out = common.scale_rows(x_hat, factor)  # a new tensor: outlives later calls

    # Cached dispatch: the handle's layout, no top-k.
    cached_x, cached_idx, cached_w, _, _, event = buffer.dispatch(
        x=x_in, handle=handle, config=dispatch_config, **extras()
    )
    finish(event)
    c_values, c_scales = unpack_recv_x(cached_x, fp8)
    with found.section():
        check(c_values.shape[0] == exp.num_recv,
              f"cached dispatch: {c_values.shape[0]} rows, expected {exp.num_recv}")
        check_received("cached dispatch", exp, fp8, c_values, c_scales, exp.num_recv)
        check(cached_idx is None and cached_w is None, "cached dispatch returned top-k outputs")

    worst = None
    if with_topk:
        num_worst = shape.num_tokens * R
        w_x, w_idx, w_w, w_counts, w_handle, event = buffer.dispatch(
            **args, num_worst_tokens=num_worst, **extras()
        )
        finish(event)
        w_values, w_scales = unpack_recv_x(w_x, fp8)
        with found.section():
            for name, t in (("recv_x", w_values), ("recv_topk_idx", w_idx), ("recv_topk_weights", w_w)):
                check(t is not None and t.shape[0] == num_worst,
                      f"num_worst_tokens={num_worst}: {name} has "
                      f"{None if t is None else t.shape[0]} rows, expected {num_worst}")
            if fp8:
                check(w_scales.shape[0] == num_worst,
                      f"num_worst_tokens={num_worst}: scales have {w_scales.shape[0]} rows")
            check(w_counts == [], f"num_worst_tokens={num_worst}: num_recv_tokens_per_expert_list is "
                  f"{w_counts}, DeepEP's is []")
            check_received("num_worst_tokens dispatch", exp, fp8, w_values, w_scales, exp.num_recv)
            expect_equal("num_worst_tokens recv_topk_idx (received rows)", w_idx[: exp.num_recv], exp.recv_topk_idx)
            expect_equal("num_worst_tokens recv_topk_weights (local experts)",
                         w_w[: exp.num_recv][exp.recv_local], exp.recv_topk_weights[exp.recv_local])
            padding = w_idx[exp.num_recv:]
            expect_equal("num_worst_tokens recv_topk_idx (padding rows)", padding, torch.full_like(padding, -1))
        with found.section():
            # DeepEP returns an empty list here (the counts would need a host sync); a list
            # that is given must be right.
            check(len(w_counts) == 0 or list(w_counts) == exp.recv_count_per_expert,
                  f"num_worst_tokens: num_recv_tokens_per_expert_list {list(w_counts)}, expected [] "
                  f"or {exp.recv_count_per_expert}")
        worst = (int(w_values.shape[0]), w_handle)

    # Combine: the reference is built from this rank's own tokens.
    x_hat_own = (common.dequantize_fp8(inputs.x_fp8, inputs.x_scales).to(torch.bfloat16)
                 if fp8 else inputs.x)
    ref, magnitude = combine_reference(env, shape, inputs, x_hat_own, with_topk)
    bound = common.bf16_sum_bound(magnitude)
    want_w = inputs.topk_weights.masked_fill(inputs.topk_idx < 0, 0.0)

    def combine_and_check(tag, rows, use_handle):
        kwargs = dict(x=pad_rows(expert_out, rows), handle=use_handle, config=combine_config)
        if local_weights is not None:
            kwargs["topk_weights"] = pad_rows(local_weights, rows)
        try:
            combined, combined_w, event = buffer.combine(**kwargs, **extras())
        except Exception as error:
            if "topk_weights" not in kwargs or "topk_weights" not in str(error):
                raise
            # A clear rejection of combining top-k weights is allowed (the argument is not
            # silently ignored); the rows are still checked.
            suite.note(f"combine(topk_weights=...) rejected by the library: {error}")
            del kwargs["topk_weights"]
            combined, combined_w, event = buffer.combine(**kwargs, **extras())
        finish(event)
        with found.section():
            check(combined.dtype == torch.bfloat16, f"{tag}: combined_x dtype {combined.dtype}, expected bfloat16")
            expect_within(f"{tag}: combined_x", combined, ref, bound)
        if "topk_weights" in kwargs:
            with found.section():
                expect_equal(f"{tag}: combined_topk_weights", combined_w, want_w)

    combine_and_check("combine", received, handle)
    if worst is not None:
        combine_and_check("combine (num_worst_tokens handle)", *worst)


def pad_rows(t: torch.Tensor, rows: int) -> torch.Tensor:
    """t with zero rows appended up to `rows` (t itself when it has as many)."""
    if t.shape[0] == rows:
        return t
    out = torch.zeros((rows, *t.shape[1:]), dtype=t.dtype, device=t.device)
    out[: t.shape[0]] = t
    return out


def run_shape(env: common.DistEnv, suite: common.Suite, shape: Shape, args) -> None:
    experts = common.ensure_ranks_divide(shape.num_experts, env.num_ranks)
    shape = Shape(shape.num_tokens, shape.hidden, shape.num_topk, experts)
    suite.say(f"[intranode] shape: {shape}, ranks={env.num_ranks}")
    inputs = Inputs(env, shape, args.seed)
    exp = Expected(env, shape, inputs)
    deep_ep.Buffer.set_num_sms(NUM_SMS)
    buffer = deep_ep.Buffer(env.group, nvl_bytes_for(shape, env.num_ranks, args.num_nvl_bytes), 0)

    def layout():
        out = buffer.get_dispatch_layout(inputs.topk_idx, shape.num_experts)
        check(isinstance(out, tuple) and len(out) == 5,
              f"get_dispatch_layout returned {type(out).__name__} of {len(out) if isinstance(out, tuple) else '?'}, expected a 5-tuple")
        per_rank, per_rdma_rank, per_expert, in_rank, _event = out
        expect_equal("num_tokens_per_rank", per_rank, exp.num_tokens_per_rank)
        check(per_rdma_rank is None, "num_tokens_per_rdma_rank: expected None on one host")
        expect_equal("num_tokens_per_expert", per_expert, exp.num_tokens_per_expert)
        expect_equal("is_token_in_rank", in_rank, exp.is_token_in_rank)

    suite.run(f"{shape}: get_dispatch_layout", layout)
    for fp8 in (False, True):
        for with_topk in (False, True):
            for mode in MODES:
                name = f"{shape}: {'FP8' if fp8 else 'BF16'} {'with' if with_topk else 'without'} top-k, {mode}"
                suite.run(name, lambda: run_variant(env, suite, buffer, shape, inputs, exp, fp8, with_topk, mode))

    def graph_with_worst_tokens():
        # With num_worst_tokens on the proxy path, dispatch, a stand-in expert (the rows
        # times 2) and combine can be captured in a CUDA graph: replays with new x, top-k
        # and layout written in place equal eager steps bit for bit.
        T, H, K, R = shape.num_tokens, shape.hidden, shape.num_topk, env.num_ranks
        worst = R * T
        x = torch.zeros((T, H), dtype=torch.bfloat16, device=env.device)
        idx = torch.full((T, K), -1, dtype=torch.int64, device=env.device)
        weights = torch.zeros((T, K), dtype=torch.float32, device=env.device)
        per_rank = torch.zeros((R,), dtype=torch.int32, device=env.device)
        per_expert = torch.zeros((shape.num_experts,), dtype=torch.int32, device=env.device)
        in_rank = torch.zeros((T, R), dtype=torch.bool, device=env.device)

        def step() -> torch.Tensor:
            recv_x, _, _, _, handle, _ = buffer.dispatch(
                x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
                num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=weights,
                num_worst_tokens=worst)
            combined, _, _ = buffer.combine(recv_x * 2, handle)
            return combined

        def load(seed: int) -> None:
            new = Inputs(env, shape, seed)
            layout = buffer.get_dispatch_layout(new.topk_idx, shape.num_experts)
            x.copy_(new.x)
            idx.copy_(new.topk_idx)
            weights.copy_(new.topk_weights)
            per_rank.copy_(layout[0])
            per_expert.copy_(layout[2])
            in_rank.copy_(layout[3])

        common.check_graph_replays(env, step, lambda i: load(args.seed + 40 + i), 3)
        torch.cuda.synchronize()
        env.barrier()

    if buffer.transport == "proxy":
        suite.run(f"{shape}: dispatch (num_worst_tokens), stand-in expert and combine captured "
                  "in a CUDA graph, replayed with new inputs", graph_with_worst_tokens)
    else:
        suite.note("the high-throughput CUDA graph case runs on the proxy path only (the direct "
                   "path reads the counts on the host)")

    def refused_under_capture():
        # A high-throughput dispatch reads the received counts on the host: under CUDA
        # graph capture it is refused at once, saying why, on every rank alike.
        graph = torch.cuda.CUDAGraph()
        message = ""
        try:
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                buffer.dispatch(inputs.x, num_tokens_per_rank=exp.num_tokens_per_rank,
                                is_token_in_rank=exp.is_token_in_rank,
                                num_tokens_per_expert=exp.num_tokens_per_expert)
        except Exception as error:  # noqa: BLE001 - the message is what is checked
            message = str(error)
        check("being captured into a graph" in message,
              f"dispatch under capture: expected Courier's refusal, got {message!r}")
        torch.cuda.synchronize()
        env.barrier()

    suite.run(f"{shape}: dispatch under CUDA graph capture is refused, naming why",
              refused_under_capture)
    # Buffer teardown is collective: drop every reference on every rank at the same point.
    del buffer
    gc.collect()
    env.barrier()


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    env = common.init_dist(args.backend, args.device)
    suite = common.Suite("intranode", env)
    shapes = {"small": SMALL, "standard": STANDARD, "all": SMALL + STANDARD}[args.shapes]
    for shape in shapes:
        run_shape(env, suite, shape, args)
    status = suite.finish()
    common.finish_dist(env)
    return status


if __name__ == "__main__":
    sys.exit(main())
