"""One rank of the multi-process courier.deep_ep checks, run under
``courier-run -n N python ep_ranks.py CASE...`` by test_multiprocess.py.

Every rank builds every rank's inputs from the same seeds, computes what it
should receive with plain numpy, and compares. A case prints
``PASS <case>: <detail>`` or raises (the rank then exits non-zero).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Callable, Dict, List, Tuple

import numpy as np

import courier
from courier import deep_ep

HIDDEN = 128  # a multiple of 128: FP8 scales
TOPK = 4
EXPERTS_PER_RANK = 4


class FileGroup:
    """A process group made of files in a shared directory: the
    rank()/size()/allgather()/barrier() object courier.deep_ep.Buffer accepts
    in place of a torch.distributed group (so the Python bootstrap path runs
    without torch)."""

    def __init__(self, directory: str, rank: int, size: int) -> None:
        self.directory, self._rank, self._size, self.calls = directory, rank, size, 0

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size

    def allgather(self, block: bytes) -> bytes:
        self.calls += 1
        name = os.path.join(self.directory, f"c{self.calls}-r{self._rank}")
        with open(name + ".tmp", "wb") as f:
            f.write(block)
        os.rename(name + ".tmp", name)
        blocks = []
        for r in range(self._size):
            path = os.path.join(self.directory, f"c{self.calls}-r{r}")
            deadline = time.monotonic() + 60
            while not os.path.exists(path):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"FileGroup: rank {r} never wrote {path}")
                time.sleep(0.002)
            with open(path, "rb") as f:
                blocks.append(f.read())
        return b"".join(blocks)

    def barrier(self) -> None:
        self.allgather(b"")


def inputs(rank: int, call: int, ranks: int,
           empty_rank: int = -1) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rank `rank`'s x [T, HIDDEN] float32 (small integers: exact in
    bfloat16), topk_idx [T, TOPK] int64 (distinct experts, about one in
    eight -1) and topk_weights [T, TOPK] float32 for call `call`; no
    tokens at all on `empty_rank`."""
    if rank == empty_rank:
        return (np.zeros((0, HIDDEN), np.float32), np.zeros((0, TOPK), np.int64),
                np.zeros((0, TOPK), np.float32))
    rng = np.random.default_rng(1000 * rank + call)
    experts = EXPERTS_PER_RANK * ranks
    tokens = 10 + 3 * rank + call
    idx = np.stack([rng.choice(experts, TOPK, replace=False) for _ in range(tokens)])
    idx = idx.astype(np.int64)
    idx[rng.random((tokens, TOPK)) < 0.125] = -1
    weights = (rng.integers(1, 5, (tokens, TOPK)) * 0.25).astype(np.float32)
    t = np.arange(tokens)[:, None]
    h = np.arange(HIDDEN)[None, :]
    x = ((rank * 37 + t * 11 + h * 3 + call) % 101 - 50).astype(np.float32)
    return x, idx, weights


def expected_receive(me: int, ranks: int, call: int,
                     empty_rank: int = -1) -> Dict[str, np.ndarray]:
    """What rank `me` receives in a high-throughput dispatch: each rank's
    tokens with an expert here, in rank then token order."""
    per = EXPERTS_PER_RANK
    rows, idx_rows, w_rows, local_sums = [], [], [], []
    counts = np.zeros(per, np.int64)
    per_source = np.zeros(ranks, np.int64)
    for s in range(ranks):
        x, idx, w = inputs(s, call, ranks, empty_rank)
        local = (idx >= 0) & (idx // per == me)
        per_source[s] = int(local.any(axis=1).sum())
        for t in np.nonzero(local.any(axis=1))[0]:
            rows.append(x[t])
            idx_rows.append(np.where(local[t], idx[t] - me * per, -1))
            w_rows.append(np.where(local[t], w[t], 0.0))
            local_sums.append(w[t][local[t]].sum())
            for e in idx[t][local[t]]:
                counts[e - me * per] += 1
    return {
        "x": np.array(rows, np.float32).reshape(-1, HIDDEN),
        "idx": np.array(idx_rows, np.int64).reshape(-1, TOPK),
        "weights": np.array(w_rows, np.float32).reshape(-1, TOPK),
        "local_sums": np.array(local_sums, np.float32),
        "counts": counts,
        "per_source": per_source,
    }


def layout_reference(idx: np.ndarray, ranks: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    per = EXPERTS_PER_RANK
    in_rank = np.zeros((idx.shape[0], ranks), bool)
    per_expert = np.zeros(per * ranks, np.int32)
    for t, row in enumerate(idx):
        for e in row[row >= 0]:
            per_expert[e] += 1
            in_rank[t, e // per] = True
    return in_rank.sum(axis=0).astype(np.int32), per_expert, in_rank


def check(ok: bool, what: str) -> None:
    if not ok:
        raise AssertionError(what)


def make_buffer(**kwargs) -> deep_ep.Buffer:
    return deep_ep.Buffer(None, **kwargs)


def case_layout(buffer: deep_ep.Buffer) -> str:
    ranks = buffer.group_size
    _, idx, _ = inputs(buffer.rank, 0, ranks)
    per_rank, per_rdma, per_expert, in_rank, event = buffer.get_dispatch_layout(
        idx, EXPERTS_PER_RANK * ranks)
    want_rank, want_expert, want_in = layout_reference(idx, ranks)
    # Ranks of several hosts (COURIER_RANKS_PER_HOST): tokens per host, a
    # token counted once per host it goes to; one host: None, as DeepEP's.
    per_host = int(os.environ.get("COURIER_RANKS_PER_HOST", "0") or 0)
    if per_host and ranks > per_host:
        hosts = -(-ranks // per_host)
        want_hosts = np.array([want_in[:, h * per_host:(h + 1) * per_host].any(axis=1).sum()
                               for h in range(hosts)], np.int32)
        check(per_rdma is not None and per_rdma.dtype == np.int32
              and np.array_equal(per_rdma, want_hosts),
              f"num_tokens_per_rdma_rank {per_rdma} != {want_hosts}")
    else:
        check(per_rdma is None, "num_tokens_per_rdma_rank is not None on one host")
    check(isinstance(event, deep_ep.EventOverlap), "no EventOverlap")
    check(per_rank.dtype == np.int32 and np.array_equal(per_rank, want_rank),
          f"num_tokens_per_rank {per_rank} != {want_rank}")
    check(np.array_equal(per_expert, want_expert), "num_tokens_per_expert differs")
    check(in_rank.dtype == np.bool_ and np.array_equal(in_rank, want_in),
          "is_token_in_rank differs")
    return f"{idx.shape[0]} tokens, {int(want_rank.sum())} token-rank pairs exact"


def dispatch_combine(buffer: deep_ep.Buffer, call: int, to_dtype: Callable, rtol: float) -> int:
    me, ranks = buffer.rank, buffer.group_size
    x, idx, w = inputs(me, call, ranks)
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(idx, EXPERTS_PER_RANK * ranks)
    recv_x, recv_idx, recv_w, counts, handle, _ = buffer.dispatch(
        to_dtype(x), num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
        num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w, expert_alignment=4)
    want = expected_receive(me, ranks, call)
    check(recv_x.dtype == to_dtype(x).dtype, f"recv_x dtype {recv_x.dtype}")
    check(np.array_equal(recv_x.astype(np.float32), want["x"]), f"call {call}: recv_x differs")
    check(np.array_equal(recv_idx, want["idx"]), f"call {call}: recv_topk_idx differs")
    check(np.array_equal(recv_w, want["weights"]), f"call {call}: recv_topk_weights differs")
    aligned = [int(-(-c // 4) * 4) for c in want["counts"]]
    check(counts == aligned, f"call {call}: num_recv_tokens_per_expert {counts} != {aligned}")
    # DeepEP's handle: rank_prefix_matrix[i][me] ends the rows from rank i
    # (DeepEP's test_intranode checks recv_x with it); other columns -1;
    # is_token_in_rank as given; the entries Courier has no use for None.
    prefix, channel_prefix, _, _, given_in_rank, send_head = handle
    check(len(handle) == 6 and prefix is handle[0] and prefix.dtype == np.int32
          and prefix.shape == (ranks, ranks), f"handle[0] is {prefix!r}")
    check(np.array_equal(prefix[:, me], np.cumsum(want["per_source"])),
          f"call {call}: rank_prefix_matrix[:, {me}] = {prefix[:, me]}, want "
          f"{np.cumsum(want['per_source'])}")
    check(np.all(np.delete(prefix, me, axis=1) == -1), "other columns of rank_prefix_matrix")
    check(given_in_rank is in_rank and handle[4] is in_rank, "handle[4] is not is_token_in_rank")
    check(channel_prefix is None and send_head is None and handle[-1] is None,
          "handle[1] and handle[5] are not None")

    # Cached handle, padded to a fixed row count: the same rows, zeros after.
    # The bound DeepEP's callers use: every rank's tokens (the most any rank has).
    worst = ranks * (10 + 3 * (ranks - 1) + call)
    again, none_idx, none_w, none_counts, none_handle, _ = buffer.dispatch(
        to_dtype(x), handle=handle, num_worst_tokens=worst)
    check(none_idx is None and none_w is None and none_counts is None and none_handle is None,
          "cached dispatch returned more than recv_x")
    check(again.shape == (worst, HIDDEN), f"padded cached recv_x has shape {again.shape}")
    rows = want["x"].shape[0]
    check(np.array_equal(again[:rows].astype(np.float32), want["x"]),
          "cached rows differ from the uncached ones")
    check(not np.any(again[rows:].astype(np.float32)), "padding rows are not zero")

    # Experts weight their rows; combine sums them back per token.
    y = want["x"] * want["local_sums"][:, None]
    combined, combined_w, _ = buffer.combine(to_dtype(y), handle, topk_weights=recv_w)
    # Each expert's weight lives on one rank; the others sent 0 for it.
    check(np.array_equal(combined_w, np.where(idx >= 0, w, 0)), "combined_topk_weights differ")
    total = np.where(idx >= 0, w, 0).sum(axis=1)
    np.testing.assert_allclose(combined.astype(np.float32), x * total[:, None], rtol=rtol,
                               atol=rtol, err_msg=f"call {call}: combined_x")

    # A padded dispatch: its outputs, padding included, go back to combine
    # as they are (DeepEP's num_worst_tokens); the padding rows are ignored,
    # so they may hold anything.
    w_x, w_idx, w_w, w_counts, w_handle, _ = buffer.dispatch(
        to_dtype(x), num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
        num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w, num_worst_tokens=worst)
    check(w_counts == [], f"num_worst_tokens: num_recv_tokens_per_expert_list is {w_counts}, "
          "not [] (DeepEP's)")
    check(w_x.shape == (worst, HIDDEN) and w_idx.shape == (worst, TOPK)
          and w_w.shape == (worst, TOPK), f"padded dispatch shapes {w_x.shape}, {w_idx.shape}")
    check(np.array_equal(w_x[:rows].astype(np.float32), want["x"]), "padded dispatch rows differ")
    check(np.all(w_idx[rows:] == -1), "padding rows of recv_topk_idx are not -1")
    padded_y = np.full((worst, HIDDEN), 1000.0, np.float32)
    padded_y[:rows] = y
    padded_w = np.full((worst, TOPK), 7.0, np.float32)
    padded_w[:rows] = w_w[:rows]
    again_x, again_w, _ = buffer.combine(to_dtype(padded_y), w_handle, topk_weights=padded_w)
    check(np.array_equal(again_x, combined), f"call {call}: combine of padded rows differs")
    check(np.array_equal(again_w, combined_w), f"call {call}: padded combined_topk_weights differ")
    return rows


def case_ht_zero_tokens(buffer: deep_ep.Buffer) -> str:
    """Rank 0 has no tokens: numpy gives its empty arrays (and the layout's
    is_token_in_rank for them) zero strides; it still takes part."""
    me, ranks = buffer.rank, buffer.group_size
    x, idx, w = inputs(me, 7, ranks, empty_rank=0)
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(idx, EXPERTS_PER_RANK * ranks)
    check(in_rank.shape == (x.shape[0], ranks), f"is_token_in_rank has shape {in_rank.shape}")
    recv_x, recv_idx, recv_w, _, handle, _ = buffer.dispatch(
        x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
        num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w)
    want = expected_receive(me, ranks, 7, empty_rank=0)
    check(np.array_equal(recv_x, want["x"]), "recv_x differs")
    check(np.array_equal(recv_idx, want["idx"]), "recv_topk_idx differs")
    y = want["x"] * want["local_sums"][:, None]
    combined, _, _ = buffer.combine(y, handle, topk_weights=recv_w)
    check(combined.shape == x.shape, f"combined_x has shape {combined.shape}")
    total = np.where(idx >= 0, w, 0).sum(axis=1)
    np.testing.assert_allclose(combined, x * total[:, None], rtol=1e-5, atol=1e-5)
    return f"{x.shape[0]} tokens here, {recv_x.shape[0]} rows received"


def case_ht(buffer: deep_ep.Buffer) -> str:
    rows = sum(dispatch_combine(buffer, call, lambda a: a, 1e-5) for call in range(2))
    return f"2 float32 dispatch+combine calls, {rows} rows; cached, padded and aligned right"


def case_ht_bf16(buffer: deep_ep.Buffer) -> str:
    import ml_dtypes

    rows = dispatch_combine(buffer, 0, lambda a: a.astype(ml_dtypes.bfloat16), 1e-2)
    return f"bfloat16 dispatch+combine, {rows} rows"


def case_ht_shapes(buffer: deep_ep.Buffer) -> str:
    """Dispatches of a shape seen before go ahead without the ranks talking
    first; one rank with more tokens than the Buffer holds, or a new dtype,
    makes every rank's call refused, agreed on and repeated on the right
    Buffer, with the right results."""
    import ml_dtypes

    agreements: List[Tuple[int, ...]] = []
    agree = buffer._agree

    def counted(record: Tuple[int, ...]) -> List[Tuple[int, ...]]:
        agreements.append(record)
        return agree(record)

    buffer._agree = counted  # type: ignore[method-assign]
    as_is = lambda a: a  # noqa: E731
    to_bf16 = lambda a: a.astype(ml_dtypes.bfloat16)  # noqa: E731
    rows = dispatch_combine(buffer, 0, as_is, 1e-5)
    start = len(agreements)  # 0, or 1 where the Buffer served another dtype before
    rows += dispatch_combine(buffer, 1, as_is, 1e-5)
    check(len(agreements) == start, f"dispatches of a known shape agreed {agreements[start:]}")
    # Call 14: the last rank has 10 + 3 * (ranks - 1) + 14 tokens, more than
    # the Buffer sized at call 0 holds (16 on 2 ranks, 32 on 4); rank 0 fits.
    rows += dispatch_combine(buffer, 14, as_is, 1e-5)
    check(len(agreements) == start + 1, f"growing took {len(agreements) - start} agreements")
    rows += dispatch_combine(buffer, 2, to_bf16, 1e-2)
    rows += dispatch_combine(buffer, 3, as_is, 1e-5)  # back to the grown float32 Buffer
    check(len(agreements) == start + 3, f"two dtype switches took {len(agreements) - start - 1} "
          "agreements")
    return (f"5 dispatch+combine calls, {rows} rows; agreements only to grow and to switch dtype "
            f"({len(agreements) - start})")


def case_ht_fp8(buffer: deep_ep.Buffer) -> str:
    """FP8 rows and scales arrive bit-exact (the tuple form of x)."""
    import ml_dtypes

    me, ranks = buffer.rank, buffer.group_size

    def quantize(x: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        blocks = x.reshape(x.shape[0], -1, 128)
        scales = np.maximum(np.abs(blocks).max(axis=2), 1e-4) / 448.0
        codes = (blocks / scales[:, :, None]).reshape(x.shape).astype(ml_dtypes.float8_e4m3fn)
        return codes, scales.astype(np.float32)

    x, idx, w = inputs(me, 0, ranks)
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(idx, EXPERTS_PER_RANK * ranks)
    (recv_x, recv_scales), _, _, _, handle, _ = buffer.dispatch(
        quantize(x), num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
        num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w)
    want = expected_receive(me, ranks, 0)
    want_codes, want_scales = quantize(want["x"])
    check(recv_x.dtype == ml_dtypes.float8_e4m3fn, f"recv_x dtype {recv_x.dtype}")
    check(np.array_equal(recv_x.view(np.uint8), want_codes.view(np.uint8)), "FP8 rows differ")
    check(np.array_equal(recv_scales, want_scales), "FP8 scales differ")

    # DeepEP's callers (its test_intranode tuning) reuse an FP8 dispatch's
    # handle for a cached dispatch of bfloat16 x: the rows arrive as the
    # FP8 handle laid them out.
    bf16 = x.astype(ml_dtypes.bfloat16)
    buffer.dispatch(bf16, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
                    num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w)
    cached = buffer.dispatch(bf16, handle=handle)[0]
    check(np.array_equal(cached.astype(np.float32), want["x"]),
          "a cached bfloat16 dispatch with an FP8 dispatch's handle: rows differ")

    # DeepEP's other scale formats: float32 in another layout (here every
    # other row of a larger array; at HIDDEN 128 a column-major one would
    # still be contiguous) and UE8M0 (power-of-two scales, exponent bytes
    # four per int32); the received scales come back in the same format.
    codes, scales = quantize(x)
    strided = np.repeat(scales, 2, axis=0)[::2]
    check(not strided.flags.c_contiguous, "the strided scales are contiguous")
    (again_x, again_scales), *_ = buffer.dispatch(
        (codes, strided), num_tokens_per_rank=per_rank,
        is_token_in_rank=in_rank, num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w)
    check(np.array_equal(again_x.view(np.uint8), recv_x.view(np.uint8))
          and np.array_equal(again_scales, want_scales), "strided scales: results differ")

    def pow2(scales: np.ndarray) -> np.ndarray:
        return np.ldexp(np.float32(1), np.ceil(np.log2(scales)).astype(np.int32)).astype(np.float32)

    def ue8m0(scales: np.ndarray) -> np.ndarray:
        exponents = (scales.view(np.int32) >> 23).astype(np.uint8)
        packed = np.zeros((scales.shape[0], -(-scales.shape[1] // 4) * 4), np.uint8)
        packed[:, :scales.shape[1]] = exponents
        return packed.view(np.int32)

    blocks = x.reshape(x.shape[0], -1, 128)
    p2 = pow2(np.maximum(np.abs(blocks).max(axis=2), 1e-4) / 448.0)
    p2_codes = (blocks / p2[:, :, None]).reshape(x.shape).astype(ml_dtypes.float8_e4m3fn)
    (u_x, u_scales), *_ = buffer.dispatch(
        (p2_codes, ue8m0(p2)), num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
        num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w, num_worst_tokens=64 * ranks)
    want_blocks = want["x"].reshape(want["x"].shape[0], -1, 128)
    want_p2 = pow2(np.maximum(np.abs(want_blocks).max(axis=2), 1e-4) / 448.0)
    rows = want_p2.shape[0]
    check(u_scales.dtype == np.int32 and u_scales.shape == (64 * ranks, -(-HIDDEN // 512)),
          f"UE8M0 recv scales: {u_scales.dtype} {u_scales.shape}")
    check(np.array_equal(u_scales[:rows], ue8m0(want_p2)), "UE8M0 scales differ")
    check(not np.any(u_scales[rows:]), "UE8M0 padding rows are not zero")
    want_p2_codes = (want_blocks / want_p2[:, :, None]).reshape(want["x"].shape).astype(
        ml_dtypes.float8_e4m3fn)
    check(np.array_equal(u_x[:rows].view(np.uint8), want_p2_codes.view(np.uint8)),
          "UE8M0 dispatch: FP8 rows differ")
    return (f"{recv_x.shape[0]} FP8 rows and their scales bit-exact (row-major, strided "
            "and UE8M0 scales); its handle serves a cached bfloat16 dispatch")


def case_ht_no_topk(buffer: deep_ep.Buffer) -> str:
    """dispatch without topk_idx (DeepEP allows it): rows go where
    is_token_in_rank says, no top-k outputs, the per-expert counts are the
    senders' num_tokens_per_expert; cached, padded and combined as usual."""
    me, ranks = buffer.rank, buffer.group_size
    x, idx, _ = inputs(me, 0, ranks)
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(idx, EXPERTS_PER_RANK * ranks)
    recv_x, recv_idx, recv_w, counts, handle, _ = buffer.dispatch(
        x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
        num_tokens_per_expert=per_expert, expert_alignment=2)
    want = expected_receive(me, ranks, 0)
    rows = want["x"].shape[0]
    check(recv_idx is None and recv_w is None, "dispatch without topk_idx returned top-k outputs")
    check(np.array_equal(recv_x, want["x"]), "rows differ")
    aligned = [int(-(-c // 2) * 2) for c in want["counts"]]
    check(counts == aligned, f"num_recv_tokens_per_expert {counts} != {aligned}")

    # Identity experts: each token comes back once from every rank it went to.
    combined, combined_w, _ = buffer.combine(recv_x, handle)
    check(combined_w is None, "combined_topk_weights without topk_weights")
    check(np.array_equal(combined, x * in_rank.sum(axis=1)[:, None]), "combined_x differs")

    cached = buffer.dispatch(x, handle=handle)[0]
    check(np.array_equal(cached, want["x"]), "cached rows differ")

    # Padded, and without num_tokens_per_expert: no experts to count.
    worst = ranks * 32
    w_x, w_idx, w_w, w_counts, w_handle, _ = buffer.dispatch(
        x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_worst_tokens=worst)
    check(w_idx is None and w_w is None and w_counts == [], f"padded: {w_counts}")
    check(w_x.shape == (worst, HIDDEN) and np.array_equal(w_x[:rows], want["x"]),
          "padded rows differ")
    again, _, _ = buffer.combine(w_x, w_handle)
    check(np.array_equal(again, combined), "combine of the padded rows differs")
    return f"{rows} rows by is_token_in_rank alone; counts, cache, padding and combine right"


def low_latency(buffer: deep_ep.Buffer, use_fp8: bool, hook: bool, call: int,
                round_scale: bool = False, use_ue8m0: bool = False) -> int:
    import ml_dtypes

    me, ranks = buffer.rank, buffer.group_size
    per, max_tokens = EXPERTS_PER_RANK, 32
    x, idx, w = inputs(me, call, ranks)
    stats = np.zeros(per, np.int32)
    recv, count, handle, event, recv_hook = buffer.low_latency_dispatch(
        x.astype(ml_dtypes.bfloat16), idx, max_tokens, per * ranks,
        cumulative_local_expert_recv_stats=stats, use_fp8=use_fp8, return_recv_hook=hook,
        round_scale=round_scale, use_ue8m0=use_ue8m0)
    check((recv_hook is not None) == hook, "recv_hook returned wrongly")
    if hook:
        recv_hook()
    recv_x, scales = recv if use_fp8 else (recv, None)
    if use_fp8:
        check(scales.strides[1] == 4, "scales are not column-major in the last two dimensions")
    if use_ue8m0:
        # DeepEP's UE8M0: exponent bytes, four per int32; decoded here to the
        # float scales the checks below expect.
        packs = -(-HIDDEN // 512)
        check(scales.dtype == np.int32 and scales.shape == (per, ranks * max_tokens, packs),
              f"UE8M0 scales: {scales.dtype} {scales.shape}")
        exponents = np.ascontiguousarray(scales).view(np.uint8)[..., :HIDDEN // 128]
        scales = np.ldexp(np.float32(1), exponents.astype(np.int32) - 127).astype(np.float32)
    check(recv_x.shape == (per, ranks * max_tokens, HIDDEN), f"recv_x shape {recv_x.shape}")
    src_info, layout_range, n, hidden, experts = handle
    check((n, hidden, experts) == (max_tokens, HIDDEN, per * ranks), "handle sizes differ")
    rows = 0
    for le in range(per):
        row = 0
        for s in range(ranks):
            xs, idx_s, _ = inputs(s, call, ranks)
            begin = row
            for t in np.nonzero((idx_s == me * per + le).any(axis=1))[0]:
                got = recv_x[le, row].astype(np.float32)
                if use_fp8:
                    # The scale of each 128 channels: amax / 448, or with
                    # round_scale the power of two at or above it.
                    exact = np.abs(xs[t]).reshape(-1, 128).max(axis=1) / 448.0
                    exact = np.where(exact > 0, exact, 1.0).astype(np.float32)
                    if round_scale:
                        mantissa, _ = np.frexp(scales[le, row])
                        check(np.all(mantissa == 0.5), f"expert {le} row {row}: scales "
                              f"{scales[le, row]} are not powers of two")
                        check(np.all((scales[le, row] >= exact) & (scales[le, row] < 2 * exact)),
                              f"expert {le} row {row}: scales {scales[le, row]} are not the "
                              f"powers of two at or above {exact}")
                    else:
                        np.testing.assert_allclose(scales[le, row], exact, rtol=1e-6,
                                                   err_msg=f"expert {le} row {row}: scales")
                    got = got * np.repeat(scales[le, row], 128)
                    np.testing.assert_allclose(got, xs[t], rtol=0.07, atol=1e-3,
                                               err_msg=f"expert {le} row {row} (FP8)")
                else:
                    check(np.array_equal(got, xs[t]), f"expert {le} row {row} differs")
                check(src_info[le, row] == t, f"expert {le} row {row} names token "
                      f"{src_info[le, row]}, not {t}")
                row += 1
            check(layout_range[le, s] == ((begin << 32) | (row - begin)),
                  f"layout range of expert {le} from rank {s}")
        check(count[le] == row, f"expert {le} counts {count[le]} rows, expected {row}")
        rows += row
    check(np.array_equal(stats, count), "cumulative_local_expert_recv_stats != recv_count")

    # Identity experts: send the rows back; each token gets sum_k w_k * x.
    back = recv_x.astype(np.float32)
    if use_fp8:
        back = back * np.repeat(scales, 128, axis=2)
    send = back.astype(ml_dtypes.bfloat16)
    if hook:  # zero_copy: the rows come from the combine buffer, not from x
        buffer.get_next_low_latency_combine_buffer(handle)[:] = send
        send = np.zeros_like(send)
    combined, _, combine_hook = buffer.low_latency_combine(
        send, idx, w, handle, zero_copy=hook, return_recv_hook=hook)
    if hook:
        combine_hook()
    total = np.where(idx >= 0, w, 0).sum(axis=1)
    np.testing.assert_allclose(combined.astype(np.float32), x * total[:, None],
                               rtol=0.08 if use_fp8 else 1e-2, atol=0.5 if use_fp8 else 1e-2,
                               err_msg="low-latency combined_x")
    return rows


def case_ll(buffer: deep_ep.Buffer) -> str:
    rows = low_latency(buffer, False, False, 0) + low_latency(buffer, False, True, 1)
    return f"bfloat16, at once and through the hook: {rows} expert rows, weighted combine right"


def case_ll_fp8(buffer: deep_ep.Buffer) -> str:
    rows = low_latency(buffer, True, True, 0) + low_latency(buffer, True, False, 1)
    return f"FP8 with hook and without: {rows} expert rows within e4m3 precision"


def case_ll_fp8_round_scale(buffer: deep_ep.Buffer) -> str:
    rows = low_latency(buffer, True, False, 2, round_scale=True)
    return f"FP8 with power-of-two scales (round_scale): {rows} expert rows"


def case_ll_fp8_ue8m0(buffer: deep_ep.Buffer) -> str:
    rows = low_latency(buffer, True, True, 3, round_scale=True, use_ue8m0=True)
    return f"FP8 with UE8M0 scales (round_scale, use_ue8m0), through the hook: {rows} expert rows"


def logfmt_model(x: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """A numpy model of the LogFMT round trip (docs/ep.md, "LogFMT combine")
    of bfloat16 rows x (as float32): the decoded values, and per value
    whether its 128-channel block was coded (amax < 1, finite, amin < amax)
    rather than kept bfloat16."""
    blocks = x.reshape(-1, 128).astype(np.float64)
    a = np.abs(blocks)
    amax, amin = a.max(axis=1), a.min(axis=1)
    with np.errstate(divide="ignore"):
        lmax = np.log2(amax)
        lmin = np.maximum(np.where(amin > 0, np.log2(np.where(amin > 0, amin, 1)), -np.inf),
                          lmax - 32)
    coded = (amax > 0) & (amax < 1) & np.isfinite(a).all(axis=1) & (lmin < lmax)
    step = np.where(coded, (lmax - lmin) / 510, 1.0)
    lmin = np.where(coded, lmin, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        # Nearest level in linear terms: levels m >= 1 at lmin + (m - 1) step.
        q = (np.log2(a) - lmin[:, None]) / step[:, None] + 2 - \
            np.log2((1 + np.exp2(step)) / 2)[:, None] / step[:, None]
    m = np.clip(np.floor(np.where(a > 0, q, 0)), 0, 511)
    decoded = np.where(m > 0, np.exp2(lmin[:, None] + (m - 1) * step[:, None]), 0.0)
    decoded = np.sign(blocks) * decoded
    out = np.where(coded[:, None], decoded, blocks)
    return out.reshape(x.shape), np.repeat(coded, 128).reshape(x.shape)


def calc_diff(x: np.ndarray, y: np.ndarray) -> float:
    """DeepEP's tests/utils.py calc_diff: 1 - 2 sum(x y) / sum(x^2 + y^2)
    over x + 1 and y + 1."""
    x, y = x.astype(np.float64) + 1, y.astype(np.float64) + 1
    return float(1 - 2 * (x * y).sum() / (x * x + y * y).sum())


def case_ll_logfmt(buffer: deep_ep.Buffer) -> str:
    """low_latency_combine(use_logfmt=True) as DeepEP's test_low_latency.py
    runs it: rows of small integers (blocks kept bfloat16) and of
    randn * 0.5 * r and randn * 0.1 (coded), after bfloat16 and FP8
    dispatches, at once, through the hook, and with zero_copy. Checked
    against x * (sum of weights) with DeepEP's bound (calc_diff < 1e-5 after a
    bfloat16 dispatch, 9e-4 after FP8) and per value against a numpy model
    of the round trip."""
    import ml_dtypes

    me, ranks = buffer.rank, buffer.group_size
    per, max_tokens = EXPERTS_PER_RANK, 32
    x_int, idx, w = inputs(me, 0, ranks)
    rng = np.random.default_rng(77 + me)
    x_list = [x_int] + [rng.standard_normal(x_int.shape) * 0.5 * rng.random() for _ in range(2)]
    x_list.append(rng.standard_normal(x_int.shape) * 0.1)
    total = np.where(idx >= 0, w, 0).sum(axis=1)[:, None]
    worst, coded_values, runs = 0.0, 0, 0
    for current in x_list:
        x = current.astype(ml_dtypes.bfloat16)
        exact = x.astype(np.float32)
        for use_fp8 in (False, True):
            for hook in (False, True):
                recv, _, handle, _, recv_hook = buffer.low_latency_dispatch(
                    x, idx, max_tokens, per * ranks, use_fp8=use_fp8, return_recv_hook=hook)
                if hook:
                    recv_hook()
                if use_fp8:
                    values, scales = recv
                    back = values.astype(np.float32) * np.repeat(scales, 128, axis=2)
                else:
                    back = recv.astype(np.float32)
                with np.errstate(invalid="ignore"):  # rows past the counts hold anything
                    send = back.astype(ml_dtypes.bfloat16)
                if hook:  # zero_copy too, which DeepEP's logfmt refuses and Courier's takes
                    buffer.get_next_low_latency_combine_buffer(handle)[:] = send
                    send = np.zeros_like(send)
                combined, _, combine_hook = buffer.low_latency_combine(
                    send, idx, w, handle, use_logfmt=True, zero_copy=hook, return_recv_hook=hook)
                if hook:
                    combine_hook()
                got = combined.astype(np.float32)
                check(not np.isnan(got).any(), "NaN in the LogFMT combine")
                diff = calc_diff(exact * total, got)
                bound = 9e-4 if use_fp8 else 1e-5
                check(diff < bound, f"calc_diff {diff:.2e} >= {bound} (use_fp8={use_fp8}, "
                      f"hook={hook})")
                worst = max(worst, diff) if not use_fp8 else worst
                if not use_fp8:
                    # Identity experts: every term of token t is its row x[t],
                    # so the result is model(x[t]) * sum of weights.
                    model, coded = logfmt_model(exact)
                    want = model * total
                    np.testing.assert_allclose(got[coded], want[coded], rtol=2e-2, atol=1e-6,
                                               err_msg="LogFMT-coded values vs the numpy model")
                    np.testing.assert_allclose(got[~coded], want[~coded], rtol=1e-2, atol=1e-2,
                                               err_msg="bfloat16 blocks")
                    np.testing.assert_allclose(got, exact * total, rtol=3e-2, atol=1e-6,
                                               err_msg="LogFMT combine vs x * sum(weights)")
                    coded_values += int(coded.sum())
                runs += 1
    check(coded_values > 0, "no block was LogFMT-coded: the test data missed the format")
    return (f"{runs} combines with use_logfmt (bfloat16 and FP8 dispatch, hook, zero_copy): "
            f"calc_diff <= {worst:.1e} after bfloat16 (DeepEP's bound 1e-5), {coded_values} "
            "coded values within 2% of the numpy model")


def case_ll_wait_cost(buffer: deep_ep.Buffer) -> str:
    """dispatch_wait_recv_cost_stats and combine_wait_recv_cost_stats: the
    last rank starts each call 50 ms late, so on every other rank its entry
    ends largest (the order between ranks is checked, not a time)."""
    import time

    import ml_dtypes

    me, ranks = buffer.rank, buffer.group_size
    per, max_tokens, late = EXPERTS_PER_RANK, 32, ranks - 1
    x, idx, w = inputs(me, 0, ranks)
    dispatch_cost = np.zeros(ranks, np.int64)
    combine_cost = np.zeros(ranks, np.int64)

    def late_start() -> None:
        buffer.context.barrier()
        if me == late:
            time.sleep(0.05)

    for _ in range(2):
        late_start()
        recv, _, handle, _, _ = buffer.low_latency_dispatch(
            x.astype(ml_dtypes.bfloat16), idx, max_tokens, per * ranks,
            dispatch_wait_recv_cost_stats=dispatch_cost, use_fp8=False)
        late_start()
        buffer.low_latency_combine(recv, idx, w, handle,
                                   combine_wait_recv_cost_stats=combine_cost)
    for name, cost in (("dispatch", dispatch_cost), ("combine", combine_cost)):
        check(bool((cost >= 0).all()), f"{name} wait costs {cost.tolist()} hold a negative one")
        if me != late:
            others = np.delete(cost, late)
            check(bool((others < cost[late]).all()),
                  f"{name}: rank {late} came 50 ms late twice, yet the wait costs are "
                  f"{cost.tolist()} ns")
    return (f"the late rank's wait cost is the largest: dispatch {dispatch_cost.tolist()}, "
            f"combine {combine_cost.tolist()} ns")


def case_ll_stale_hook(buffer: deep_ep.Buffer) -> str:
    """A dispatch that would reuse the receive slot of a dispatch whose hook
    has not run is refused on every rank; after the hooks run, calls work."""
    import ml_dtypes

    me, ranks = buffer.rank, buffer.group_size
    per, max_tokens = EXPERTS_PER_RANK, 32

    def dispatch(call: int, tokens: int = max_tokens):
        x, idx, _ = inputs(me, call, ranks)
        return buffer.low_latency_dispatch(x.astype(ml_dtypes.bfloat16), idx, tokens,
                                           per * ranks, return_recv_hook=True)[4]

    hooks = [dispatch(0), dispatch(1)]
    message = expect_error(lambda: dispatch(2), "has not run")
    # Of another size too, and refused before anything changes: the Buffer
    # the pending hooks receive on stays.
    expect_error(lambda: dispatch(2, max_tokens // 2), "has not run")
    hooks[0]()
    hooks[1]()
    rows = low_latency(buffer, False, True, 3)  # and the next calls work
    return f"a third dispatch awaiting hooks is refused ({message!r}); then calls work ({rows} rows)"


def expect_error(call: Callable[[], object], needle: str, kind: type = courier.Error) -> str:
    try:
        call()
    except courier.Error as error:
        check(needle in str(error), f"the error '{error}' lacks '{needle}'")
        check(isinstance(error, kind), f"the error '{error}' is a {type(error).__name__}, not a "
              f"{kind.__name__}")
        return str(error)
    raise AssertionError(f"no courier.Error (wanted '{needle}')")


def case_errors(buffer: deep_ep.Buffer) -> str:
    me, ranks = buffer.rank, buffer.group_size
    experts = EXPERTS_PER_RANK * ranks
    x, idx, w = inputs(me, 0, ranks)
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(idx, experts)
    bad = idx.copy()
    if me == 1:
        bad[2, 1] = experts
    message = expect_error(
        lambda: buffer.dispatch(x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
                                num_tokens_per_expert=per_expert, topk_idx=bad, topk_weights=w),
        f"is outside [-1, {experts})" if me == 1 else "rank 1 refused its arguments",
        courier.CallRefused)
    # The next call works.
    recv_x = buffer.dispatch(x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
                             num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w)[0]
    check(np.array_equal(recv_x, expected_receive(me, ranks, 0)["x"]), "the call after differs")
    # Ranks that disagree on the number of experts fail together.
    other = per_expert if me != 0 else np.zeros(experts + ranks, np.int32)
    expect_error(
        lambda: buffer.dispatch(x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
                                num_tokens_per_expert=other, topk_idx=idx, topk_weights=w),
        "every rank must use the same configuration")
    return f"a bad rank fails every rank with the C++ message ({message!r}); the next call works"


CASES: Dict[str, Callable[[deep_ep.Buffer], str]] = {
    "layout": case_layout,
    "ht": case_ht,
    "ht-bf16": case_ht_bf16,
    "ht-fp8": case_ht_fp8,
    "ht-shapes": case_ht_shapes,
    "ht-no-topk": case_ht_no_topk,
    "ht-zero-tokens": case_ht_zero_tokens,
    "ll": case_ll,
    "ll-fp8": case_ll_fp8,
    "ll-fp8-round-scale": case_ll_fp8_round_scale,
    "ll-logfmt": case_ll_logfmt,
    "ll-fp8-ue8m0": case_ll_fp8_ue8m0,
    "ll-stale-hook": case_ll_stale_hook,
    "ll-wait-cost": case_ll_wait_cost,
    "errors": case_errors,
}


def main(argv: List[str]) -> int:
    names = argv[1:]
    group = None
    # courier-run's variables, or torchrun's (test_multiprocess.py starts
    # ranks that way to check that a group needs no COURIER_JOB_TOKEN).
    rank = int(os.environ.get("COURIER_RANK", os.environ.get("RANK", "0")))
    ranks = int(os.environ.get("COURIER_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    if names and names[0].startswith("--file-group="):
        group = FileGroup(names[0].split("=", 1)[1], rank, ranks)
        names = names[1:]
    low_latency_mode = any(n.startswith("ll") for n in names)
    rdma = deep_ep.Buffer.get_low_latency_rdma_size_hint(32, HIDDEN, ranks,
                                                         EXPERTS_PER_RANK * ranks)
    buffer = deep_ep.Buffer(group, num_rdma_bytes=rdma, low_latency_mode=low_latency_mode)
    if group is not None:
        check(buffer.context.bootstrap_kind == "python", "the group was not used as bootstrap")
        check(group.calls > 0, "the group's allgather was never called")
    for name in names:
        detail = CASES[name](buffer)
        print(f"PASS {name}: {detail}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
