"""torch tensors through DLPack's C exchange API (torch 2.10 and later publish
it on torch.Tensor): courier.deep_ep hands the tensors themselves to the
bridge, which takes them without a Python call. One rank on the host
backend, CPU tensors; skipped where torch is not installed, or publishes no
exchange API (then the capsule path runs, which test_api.py covers)."""

from __future__ import annotations

import numpy as np
import pytest

import courier
from courier import deep_ep
from conftest import one_rank_low_latency_buffer

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(
    not deep_ep._exchanges(torch.Tensor), reason="this torch publishes no DLPack C exchange API")


@pytest.fixture(scope="module")
def buffer() -> deep_ep.Buffer:
    with one_rank_low_latency_buffer() as made:
        yield made


def inputs():
    x = (torch.arange(2 * 128, dtype=torch.float32).reshape(2, 128) % 7).to(torch.bfloat16)
    idx = torch.tensor([[0, 1], [2, -1]], dtype=torch.int64)
    w = torch.tensor([[0.5, 0.25], [1.0, 0.0]], dtype=torch.float32)
    return x, idx, w


def test_tensors_cross_as_themselves() -> None:
    x, _, _ = inputs()
    assert deep_ep._to_courier(x, "x") is x


def test_low_latency_round_trip_through_the_exchange_api(buffer: deep_ep.Buffer) -> None:
    """BF16 and FP8 dispatch and a combine, every tensor taken through the
    exchange API (FP8 arrives with DLPack 1.x's float8_e4m3fn code), the
    results as the data says: each expert's row, the weighted sum back."""
    x, idx, w = inputs()
    x.requires_grad_(True)  # taken as it is: no detach needed
    recv, count, handle, _, _ = buffer.low_latency_dispatch(x, idx, 16, 4, use_fp8=False)
    assert count.tolist() == [1, 1, 1, 0]
    assert torch.equal(recv[0, 0], x[0].detach())
    assert torch.equal(recv[2, 0], x[1].detach())
    combined, _, _ = buffer.low_latency_combine(recv, idx, w, handle)
    want = x.detach().float() * torch.tensor([[0.75], [1.0]])
    assert torch.equal(combined.float(), want)
    # The result is allocated by the native call through torch's exchange
    # API: a plain tensor of x's dtype, a new one per call.
    assert type(combined) is torch.Tensor and combined.dtype == torch.bfloat16
    again, _, _ = buffer.low_latency_combine(recv, idx, w * 2, handle)
    assert again.data_ptr() != combined.data_ptr()
    assert torch.equal(combined.float(), want) and torch.equal(again.float(), want * 2)
    fp8, _, _, _, _ = buffer.low_latency_dispatch(x.detach(), idx, 16, 4, use_fp8=True)
    values, scales = fp8
    assert values.dtype == torch.float8_e4m3fn
    decoded = values[0, 0].float() * scales[0, 0].repeat_interleave(128)
    assert torch.allclose(decoded, x[0].detach().float(), rtol=2.0**-4)


def test_a_wrong_tensor_is_named(buffer: deep_ep.Buffer) -> None:
    x, idx, _ = inputs()
    with pytest.raises(Exception, match="x: dtype float16"):
        buffer.low_latency_dispatch(x.to(torch.float16), idx, 16, 4, use_fp8=False)
    with pytest.raises(Exception, match="topk_idx"):
        buffer.low_latency_dispatch(x, idx.to(torch.int32), 16, 4, use_fp8=False)


def test_numpy_and_torch_agree(buffer: deep_ep.Buffer) -> None:
    """The same dispatch from numpy (capsules) and torch (exchange API)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x, idx, _ = inputs()
    recv_t, count_t, _, _, _ = buffer.low_latency_dispatch(x, idx, 16, 4, use_fp8=False)
    got_t = [recv_t[e, :c].float().numpy().copy() for e, c in enumerate(count_t.tolist())]
    xn = x.float().numpy().astype(ml_dtypes.bfloat16)
    recv_n, count_n, _, _, _ = buffer.low_latency_dispatch(xn, idx.numpy(), 16, 4, use_fp8=False)
    assert count_n.tolist() == count_t.tolist()
    for e, c in enumerate(count_n.tolist()):
        assert np.array_equal(recv_n[e, :c].astype(np.float32), got_t[e])


def test_follow_stream_reads_the_stream_through_the_exchange_api() -> None:
    """EpBuffer.low_latency_dispatch(follow_stream=True) asks x's exchange API
    for the current stream of x's device and runs there (the host backend
    accepts any stream); an x without the API is refused, naming it."""
    # A Buffer of its own: follow_stream leaves it on a caller's stream.
    with one_rank_low_latency_buffer() as made:
        x, idx, _ = inputs()
        made.low_latency_dispatch(x, idx, 16, 4, use_fp8=False)  # makes the native Buffer
        native = next(iter(made._ll.values()))
        result = native.low_latency_dispatch(x, idx, follow_stream=True)
        assert result.packed_recv_count is not None
        del result  # its views point into the Buffer
        bits = courier.DtypeView(np.zeros((2, 128), np.uint16), "bfloat16")
        with pytest.raises(courier.Error, match="follow_stream needs x of a type"):
            native.low_latency_dispatch(bits, idx.numpy(), follow_stream=True)
        native.synchronize()


def test_a_type_without_a_readable_table_takes_the_capsule_path(buffer: deep_ep.Buffer) -> None:
    """A tensor type whose exchange attribute is no table the bridge can read
    (here None) goes through capsules, as the bridge decides: its tensors
    that require grad are detached first, as on that path."""

    class NoTable(torch.Tensor):
        __dlpack_c_exchange_api__ = None

    assert not deep_ep._exchanges(NoTable)
    x, idx, _ = inputs()
    plain = x.as_subclass(NoTable).requires_grad_(True)
    recv, count, _, _, _ = buffer.low_latency_dispatch(plain, idx, 16, 4, use_fp8=False)
    assert count.tolist() == [1, 1, 1, 0]
    assert torch.equal(recv[0, 0].as_subclass(torch.Tensor), x[0])


def test_high_throughput_results_are_owned_torch_tensors(buffer: deep_ep.Buffer) -> None:
    """With torch tensors the high-throughput results are allocated through
    torch's exchange API and filled on the stream by the native call
    (owned=True): plain torch tensors, no views into the Buffer, that later
    dispatches leave alone; BF16, FP8 (DLPack's float8_e4m3fn code) and the
    combine's result alike."""
    x = torch.arange(3 * 128, dtype=torch.float32).reshape(3, 128).to(torch.bfloat16)
    idx = torch.tensor([[0, 3], [-1, 2], [1, -1]], dtype=torch.int64)
    w = torch.tensor([[0.5, 0.25], [1.0, 1.0], [0.75, 2.0]], dtype=torch.float32)
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(idx, 4)
    layout = dict(num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
                  num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w)
    recv_x, recv_idx, recv_w, counts, handle, _ = buffer.dispatch(x, **layout)
    for result in (recv_x, recv_idx, recv_w):
        assert type(result) is torch.Tensor
    assert torch.equal(recv_x, x) and recv_x.data_ptr() != x.data_ptr()
    assert torch.equal(recv_idx, idx)
    assert torch.equal(recv_w, torch.where(idx >= 0, w, torch.zeros_like(w)))
    assert counts == [1, 1, 1, 1]
    buffer.dispatch(x * 2, **layout)
    buffer.dispatch(x * 3, **layout)  # both receive buffers reused
    assert torch.equal(recv_x, x)
    combined, _, _ = buffer.combine(recv_x, handle, bias=torch.ones_like(x))
    assert type(combined) is torch.Tensor
    assert torch.equal(combined, x + 1)
    # FP8 with its scales, and a cached dispatch padded to num_worst_tokens.
    fp8 = x.float().clamp(-448, 448).to(torch.float8_e4m3fn)
    scales = torch.ones((3, 1), dtype=torch.float32)
    (recv_fp8, recv_scales), *_ = buffer.dispatch((fp8, scales), **layout)
    assert recv_fp8.dtype == torch.float8_e4m3fn
    assert torch.equal(recv_fp8.view(torch.uint8), fp8.view(torch.uint8))
    assert torch.equal(recv_scales, scales)
    padded = buffer.dispatch(x, handle=handle, num_worst_tokens=5)[0]
    assert padded.shape == (5, 128)
    assert torch.equal(padded[:3], x) and not padded[3:].any()


def test_owned_is_what_the_native_call_returns(buffer: deep_ep.Buffer) -> None:
    """EpBuffer.dispatch hands out views (TensorRef) without owned and torch
    tensors with it; owned needs x of a type with the exchange API, and
    without topk_idx no top-k results are made."""
    x = torch.arange(2 * 128, dtype=torch.float32).reshape(2, 128).to(torch.bfloat16)
    idx = torch.tensor([[0, 1], [2, -1]], dtype=torch.int64)
    w = torch.ones((2, 2), dtype=torch.float32)
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(idx, 4)
    buffer.dispatch(x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
                    num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w)
    native = buffer._ht_current.buffer
    assert native.can_copy_result  # gpu-host speaks GPU ABI 1.11
    views = native.dispatch(x, None, idx, w, in_rank, 4, owned=False)
    assert isinstance(views.recv_x, courier.TensorRef)
    del views
    owned = native.dispatch(x, None, idx, w, in_rank, 4, owned=True)
    assert type(owned.recv_x) is torch.Tensor and torch.equal(owned.recv_x, x)
    assert type(owned.recv_topk_idx) is torch.Tensor
    no_topk = native.dispatch(x, None, None, None, in_rank, 4, owned=True)
    assert torch.equal(no_topk.recv_x, x)
    assert no_topk.recv_topk_idx is None and no_topk.recv_topk_weights is None
    with pytest.raises(courier.Error, match="owned=True needs x of a type"):
        native.dispatch(x.float().numpy(), None, idx.numpy(), w.numpy(), in_rank.numpy(), 4,
                        owned=True)


def test_mixed_and_empty_inputs(buffer: deep_ep.Buffer) -> None:
    """A torch x with numpy top-k arguments (they cross through __dlpack__),
    a dispatch without top-k (None, None as DeepEP's), and a rank without
    tokens (empty tensors) all work with owned results."""
    x = torch.arange(2 * 128, dtype=torch.float32).reshape(2, 128).to(torch.bfloat16)
    idx = np.array([[0, 1], [2, -1]], np.int64)
    w = np.ones((2, 2), np.float32)
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(torch.from_numpy(idx), 4)
    recv_x, recv_idx, recv_w, counts, handle, _ = buffer.dispatch(
        x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank.numpy(),
        num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w)
    assert torch.equal(recv_x, x) and np.array_equal(np.asarray(recv_idx), idx)
    assert counts == [1, 1, 1, 0]
    recv_x, recv_idx, recv_w, counts, _, _ = buffer.dispatch(
        x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
        num_tokens_per_expert=per_expert)
    assert torch.equal(recv_x, x) and recv_idx is None and recv_w is None
    empty = torch.empty((0, 128), dtype=torch.bfloat16)
    none_idx = torch.empty((0, 2), dtype=torch.int64)
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(none_idx, 4)
    recv_x, recv_idx, _, counts, handle, _ = buffer.dispatch(
        empty, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
        num_tokens_per_expert=per_expert, topk_idx=none_idx,
        topk_weights=torch.empty((0, 2), dtype=torch.float32))
    assert recv_x.shape == (0, 128) and recv_idx.shape == (0, 2) and counts == [0, 0, 0, 0]
    combined, _, _ = buffer.combine(recv_x, handle)
    assert combined.shape == (0, 128)
