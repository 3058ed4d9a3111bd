"""Single-process checks of courier.deep_ep: helpers, argument validation,
and C++ errors arriving as courier.Error with their message."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

import courier
from courier import deep_ep


def test_config_validates_and_keeps_values() -> None:
    config = deep_ep.Config(24, 6, 256, 6, 128)
    assert (config.num_sms, config.num_max_nvl_chunked_recv_tokens) == (24, 256)
    assert config.get_nvl_buffer_size_hint(7168 * 2, 8) > 0
    assert config.get_rdma_buffer_size_hint(7168 * 2, 8) > 0
    with pytest.raises(ValueError, match="num_sms must be a positive integer"):
        deep_ep.Config(0)
    with pytest.raises(ValueError, match="num_max_nvl_chunked_send_tokens 300 must be below"):
        deep_ep.Config(20, 300, 256)


def test_deep_ep_module_surface() -> None:
    # What DeepEP's tests and frameworks use besides the calls themselves.
    assert deep_ep.Buffer.is_sm90_compiled() is True  # Courier's FP8 path runs everywhere
    assert deep_ep.topk_idx_t in (np.int64, getattr(sys.modules.get("torch"), "int64", None))
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        getattr(deep_ep, "no_such_name")
    # DeepEP v1.2.1's positional order: explicitly_destroy is the 8th argument.
    buffer = deep_ep.Buffer(None, 0, 0, False, 24, True, False, True)
    assert buffer.explicitly_destroy
    buffer.destroy()
    with pytest.raises(TypeError):
        deep_ep.Buffer(None, 0, 0, False, 24, True, False, False, None, False)  # use_fabric: keyword


def test_static_helpers() -> None:
    assert isinstance(deep_ep.Buffer.get_dispatch_config(8), deep_ep.Config)
    assert isinstance(deep_ep.Buffer.get_combine_config(3), deep_ep.Config)
    with pytest.raises(ValueError, match="num_ranks must be positive"):
        deep_ep.Buffer.get_dispatch_config(0)
    saved = deep_ep.Buffer.num_sms
    try:
        deep_ep.Buffer.set_num_sms(24)
        assert deep_ep.Buffer.get_dispatch_config(2).num_sms == 24
        with pytest.raises(ValueError, match="must be even"):
            deep_ep.Buffer.set_num_sms(23)
    finally:
        deep_ep.Buffer.num_sms = saved
    small = deep_ep.Buffer.get_low_latency_rdma_size_hint(128, 7168, 8, 288)
    large = deep_ep.Buffer.get_low_latency_rdma_size_hint(256, 7168, 8, 288)
    assert 0 < small < large
    with pytest.raises(ValueError, match="hidden must be positive"):
        deep_ep.Buffer.get_low_latency_rdma_size_hint(128, 0, 8, 288)
    event = deep_ep.Buffer.capture()
    event.current_stream_wait()
    with event:
        pass


@pytest.fixture(scope="module")
def buffer() -> deep_ep.Buffer:
    """A one-rank job (no launcher variables), low-latency mode allowed."""
    from conftest import one_rank_low_latency_buffer

    with one_rank_low_latency_buffer() as made:
        yield made


def test_single_rank_layout(buffer: deep_ep.Buffer) -> None:
    assert (buffer.rank, buffer.group_size) == (0, 1)
    idx = np.array([[0, 3], [-1, 2], [1, -1]], np.int64)
    per_rank, per_rdma, per_expert, in_rank, _ = buffer.get_dispatch_layout(idx, 4)
    assert per_rdma is None
    assert per_rank.tolist() == [3]
    assert per_expert.tolist() == [1, 1, 1, 1]
    assert in_rank.tolist() == [[True], [True], [True]]


def test_dlpack_capsules_are_taken_once(buffer: deep_ep.Buffer) -> None:
    # courier.deep_ep hands torch tensors over as DLPack capsules (torch's
    # to_dlpack); numpy's capsules go the same way through the bridge.
    idx = np.array([[0, 3], [-1, 2], [1, -1]], np.int64)
    per_rank = np.empty((1,), np.int32)
    per_expert = np.empty((4,), np.int32)
    in_rank = np.empty((3, 1), np.bool_)
    capsule = idx.__dlpack__()
    buffer._layout.get_dispatch_layout(capsule, 4, per_rank.__dlpack__(),
                                       per_expert.__dlpack__(), in_rank.__dlpack__())
    assert per_rank.tolist() == [3] and per_expert.tolist() == [1, 1, 1, 1]
    assert in_rank.tolist() == [[True], [True], [True]]
    with pytest.raises(courier.Error, match="already consumed"):
        buffer._layout.get_dispatch_layout(capsule, 4, per_rank, per_expert, in_rank)
    view = courier._courier.DtypeView(np.zeros((2, 2), np.uint16).__dlpack__(), "bfloat16")
    assert view.dtype == "bfloat16"


def test_cxx_errors_arrive_with_their_message(buffer: deep_ep.Buffer) -> None:
    idx = np.array([[0, 7]], np.int64)
    with pytest.raises(courier.Error) as info:
        buffer.get_dispatch_layout(idx, 4)
    assert str(info.value) == ("get_dispatch_layout: topk_idx[0][1] = 7 is outside [-1, 4) "
                               "(num_experts)")
    with pytest.raises(courier.Error, match="topk_idx: dtype int32 where int64 is required"):
        buffer.get_dispatch_layout(idx.astype(np.int32), 4)
    with pytest.raises(TypeError, match="expected a numpy array or a torch tensor"):
        buffer.get_dispatch_layout([[0, 1]], 4)


def test_streams_on_the_host_backend(buffer: deep_ep.Buffer) -> None:
    """gpu-host accepts any stream (its kernels run before each call
    returns, which keeps every stream's order); synchronize and
    use_own_stream work on it."""
    native = buffer._layout
    assert native.can_set_stream is True
    native.set_stream(1)
    per_rank, _, _, _, _ = buffer.get_dispatch_layout(np.array([[0, 1]], np.int64), 4)
    native.synchronize()
    assert per_rank.tolist() == [1]
    native.use_own_stream()
    per_rank, _, _, _, _ = buffer.get_dispatch_layout(np.array([[0, 1]], np.int64), 4)
    assert per_rank.tolist() == [1]


def test_dispatch_output_as_tuple(buffer: deep_ep.Buffer) -> None:
    """as_tuple, the hot path's single read of a dispatch's results, holds
    what the attributes hold."""
    x = np.arange(3 * 128, dtype=np.float32).reshape(3, 128)
    idx = np.array([[0, 3], [-1, 2], [1, -1]], np.int64)
    w = np.array([[0.5, 0.25], [1.0, 1.0], [0.75, 2.0]], np.float32)
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(idx, 4)
    buffer.dispatch(x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
                    num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w)
    out = buffer._ht_current.buffer.dispatch(x, None, idx, w, in_rank, 4)
    items = out.as_tuple()
    assert len(items) == 6
    names = ("recv_x", "recv_x_scales", "recv_topk_idx", "recv_topk_weights")
    for got, name in zip(items[:4], names):
        want = getattr(out, name)
        if want is None:
            assert got is None, name
        else:
            assert np.array_equal(np.from_dlpack(got), np.from_dlpack(want)), name
    assert np.array_equal(np.from_dlpack(items[0]), x)
    assert items[4] == out.num_recv_tokens_per_expert == [1, 1, 1, 1]
    assert list(items[5].recv_counts) == list(out.handle.recv_counts) == [3]


def test_single_rank_dispatch_combine(buffer: deep_ep.Buffer) -> None:
    x = np.arange(3 * 128, dtype=np.float32).reshape(3, 128)
    idx = np.array([[0, 3], [-1, 2], [1, -1]], np.int64)
    w = np.array([[0.5, 0.25], [1.0, 1.0], [0.75, 2.0]], np.float32)
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(idx, 4)
    recv_x, recv_idx, recv_w, counts, handle, _ = buffer.dispatch(
        x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
        num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w)
    assert np.array_equal(recv_x, x)
    assert np.array_equal(recv_idx, idx)
    assert np.array_equal(recv_w, np.where(idx >= 0, w, 0))
    assert counts == [1, 1, 1, 1]
    # The results are the caller's: a second dispatch does not change them.
    buffer.dispatch(x * 2, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
                    num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w)
    assert np.array_equal(recv_x, x)
    combined, _, _ = buffer.combine(recv_x, handle, bias=np.ones_like(x))
    assert np.allclose(combined, x + 1)
    # A cached dispatch of another dtype needs a Buffer that served that
    # dtype before (it takes the handle's layout there), and says so.
    import ml_dtypes

    with pytest.raises(ValueError, match="needs an uncached dispatch of that dtype"):
        buffer.dispatch(x.astype(ml_dtypes.bfloat16), handle=handle)
    buffer.dispatch(x.astype(ml_dtypes.bfloat16), num_tokens_per_rank=per_rank,
                    is_token_in_rank=in_rank, num_tokens_per_expert=per_expert, topk_idx=idx,
                    topk_weights=w)
    cached = buffer.dispatch(x.astype(ml_dtypes.bfloat16), handle=handle)[0]
    assert np.array_equal(cached, x.astype(ml_dtypes.bfloat16))


def test_arguments_that_change_results_are_refused(buffer: deep_ep.Buffer) -> None:
    x = np.zeros((2, 128), np.float32)
    idx = np.zeros((2, 2), np.int64)
    w = np.ones((2, 2), np.float32)
    with pytest.raises(ValueError, match="is_token_in_rank is required without a handle"):
        buffer.dispatch(x)
    with pytest.raises(ValueError, match="topk_idx and topk_weights go together"):
        buffer.dispatch(x, is_token_in_rank=np.ones((2, 1), bool), topk_idx=idx)
    with pytest.raises(ValueError, match="handle must be the handle a dispatch"):
        buffer.combine(x, handle=("not", "a", "handle"))
    with pytest.raises(ValueError, match="use_ue8m0 needs use_fp8=True and round_scale=True"):
        buffer.low_latency_dispatch(x, idx, 16, 4, use_ue8m0=True)
    with pytest.raises(ValueError, match="num_rdma_bytes .* is below"):
        buffer.low_latency_dispatch(x, idx, 4096, 4)
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(idx, 4)
    handle = buffer.dispatch(x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
                             num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w)[4]
    with pytest.raises(ValueError, match=r"combine: topk_weights must be \[2, num_topk\] float32"):
        buffer.combine(x, handle, topk_weights=w.astype(np.float64))
    with pytest.raises(ValueError, match="with a handle .* topk_idx and topk_weights must be"):
        buffer.dispatch(x, handle=handle, topk_idx=idx)
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x16 = x.astype(ml_dtypes.bfloat16)
    recv, _, ll_handle, _, _ = buffer.low_latency_dispatch(x16, idx, 16, 4, use_fp8=False)
    # use_logfmt is taken (tests/python/ep_ranks.py checks its values); it
    # needs bfloat16 rows, so float32 ones are refused with the reason.
    combined, _, _ = buffer.low_latency_combine(recv, idx, w, ll_handle, use_logfmt=True)
    assert np.array_equal(combined.astype(np.float32), np.zeros((2, 128), np.float32))
    # (hidden 64 keeps the rows' bytes, which num_rdma_bytes was sized for.)
    x32 = np.ascontiguousarray(x[:, :64])
    recv32, _, ll_handle32, _, _ = buffer.low_latency_dispatch(x32, idx, 16, 4, use_fp8=False)
    with pytest.raises(courier.Error, match="use_logfmt needs bfloat16 x"):
        buffer.low_latency_combine(recv32, idx, w, ll_handle32, use_logfmt=True)


def test_buffer_arguments() -> None:
    with pytest.raises(ValueError, match="num_rdma_bytes must be a non-negative integer"):
        deep_ep.Buffer(None, num_rdma_bytes=-1)
    with pytest.raises(ValueError, match="enable_shrink=True is not supported"):
        deep_ep.Buffer(None, enable_shrink=True)
    with pytest.raises(TypeError, match="neither a torch.distributed process group"):
        deep_ep.Buffer(object())


def test_low_latency_needs_low_latency_mode() -> None:
    plain = deep_ep.Buffer(None)
    x = np.zeros((2, 128), np.float32)
    with pytest.raises(ValueError, match="without low_latency_mode=True"):
        plain.low_latency_dispatch(x, np.zeros((2, 2), np.int64), 16, 4)
    with pytest.raises(ValueError, match="explicitly_destroy"):
        plain.destroy()


def test_bad_environment_is_a_courier_error() -> None:
    with pytest.raises(courier.Error, match="COURIER_FIFO_DEPTH"):
        courier.Context(env={"COURIER_FIFO_DEPTH": "banana"})


def test_more_tokens_grow_the_buffer_and_old_handles_fail(buffer: deep_ep.Buffer) -> None:
    def dispatch(tokens: int):
        x = np.full((tokens, 128), 2.0, np.float32)
        idx = np.tile(np.array([[0, 1]], np.int64), (tokens, 1))
        w = np.ones((tokens, 2), np.float32)
        per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(idx, 4)
        return buffer.dispatch(x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
                               num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w)

    small = dispatch(3)
    large = dispatch(40)  # beyond the first Buffer's 16 tokens: a larger one replaces it
    assert large[0].shape == (40, 128) and np.all(large[0] == 2.0)
    combined, _, _ = buffer.combine(large[0], large[4])
    assert np.all(combined == 2.0)
    with pytest.raises(courier.Error, match="made before the Buffer grew"):
        buffer.combine(small[0], small[4])


def test_dispatch_without_topk_and_padded_combine(buffer: deep_ep.Buffer) -> None:
    """No topk_idx: rows by is_token_in_rank, no top-k outputs, counts from
    num_tokens_per_expert. A num_worst_tokens dispatch's padded rows go back
    to combine as they are."""
    x = np.arange(3 * 128, dtype=np.float32).reshape(3, 128)
    in_rank = np.array([[True], [False], [True]])
    per_expert = np.array([2, 1, 0, 1], np.int32)
    recv_x, recv_idx, recv_w, counts, handle, _ = buffer.dispatch(
        x, num_tokens_per_rank=np.array([2], np.int32), is_token_in_rank=in_rank,
        num_tokens_per_expert=per_expert)
    assert recv_idx is None and recv_w is None
    assert np.array_equal(recv_x, x[[0, 2]])
    assert counts == [2, 1, 0, 1]
    combined, _, _ = buffer.combine(recv_x * 2, handle)
    assert np.array_equal(combined, x * 2 * in_rank)

    idx = np.array([[0, -1], [1, 2], [-1, -1]], np.int64)
    w = np.ones((3, 2), np.float32)
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(idx, 4)
    recv_x, recv_idx, recv_w, _, handle, _ = buffer.dispatch(
        x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
        num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w, num_worst_tokens=8)
    assert recv_x.shape == (8, 128) and np.array_equal(recv_x[:2], x[:2])
    assert np.all(recv_idx[2:] == -1)
    recv_x[2:] = 99.0  # padding rows: ignored by combine, whatever they hold
    combined, combined_w, _ = buffer.combine(recv_x, handle, topk_weights=recv_w)
    assert np.array_equal(combined, x * np.array([[1], [1], [0]], np.float32))
    assert np.array_equal(combined_w, np.where(idx >= 0, w, 0))


class _OneRankGroup:
    """The plain group protocol for a job of one rank."""

    def __init__(self) -> None:
        self.calls = 0

    def rank(self) -> int:
        return 0

    def size(self) -> int:
        return 1

    def allgather(self, block: bytes) -> bytes:
        self.calls += 1
        return block

    def barrier(self) -> None:
        self.calls += 1


def test_a_torch_process_group_is_not_taken_for_a_plain_group(monkeypatch) -> None:
    """torch's ProcessGroup has allgather() and barrier() methods of its own
    (tensor lists): it goes to the torch bootstrap, plain group objects to
    theirs. A stand-in torch.distributed (torch is optional here)."""

    class ProcessGroup:
        def rank(self) -> int:
            return 0

        def size(self) -> int:
            return 1

        def allgather(self, *args: object) -> None:
            raise AssertionError("the ProcessGroup's own allgather was called")

        def barrier(self, *args: object) -> None:
            raise AssertionError("the ProcessGroup's own barrier was called")

    dist = types.ModuleType("torch.distributed")
    dist.ProcessGroup = ProcessGroup
    torch = types.ModuleType("torch")
    torch.distributed = dist
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.distributed", dist)
    through_torch = []

    def torch_bootstrap(group: object) -> courier.CallbackBootstrap:
        through_torch.append(group)
        return courier.CallbackBootstrap(0, 1, lambda block: block, lambda: None)

    monkeypatch.setattr(deep_ep, "_torch_group_bootstrap", torch_bootstrap)
    group = ProcessGroup()
    buffer = deep_ep.Buffer(group)
    assert through_torch == [group]
    assert buffer.context.bootstrap_kind == "python" and buffer.group is group

    plain = _OneRankGroup()
    buffer = deep_ep.Buffer(plain)
    assert through_torch == [group] and plain.calls > 0
    assert buffer.context.bootstrap_kind == "python"


def test_buffer_on_a_torch_gloo_group(tmp_path) -> None:
    """A real torch.distributed group (gloo, one rank) bootstraps a Buffer;
    torch CPU tensors in and out. Skipped without torch."""
    torch = pytest.importorskip("torch")
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available():
        pytest.skip("this torch has no torch.distributed")
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0,
                            world_size=1)
    try:
        buffer = deep_ep.Buffer(dist.group.WORLD)
        assert buffer.context.bootstrap_kind == "python" and buffer.group_size == 1
        x = torch.arange(4 * 128, dtype=torch.float32).reshape(4, 128)
        idx = torch.tensor([[0, 1], [2, -1], [-1, -1], [3, 0]], dtype=torch.int64)
        w = torch.full((4, 2), 0.5, dtype=torch.float32)
        per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(idx, 4)
        recv_x, _, _, counts, handle, _ = buffer.dispatch(
            x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
            num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=w)
        assert isinstance(recv_x, torch.Tensor) and torch.equal(recv_x, x[[0, 1, 3]])
        assert counts == [2, 1, 1, 1]
        combined, _, _ = buffer.combine(recv_x, handle)
        assert torch.equal(combined, x * in_rank[:, :1])
    finally:
        dist.destroy_process_group()


def test_low_latency_results_are_written_in_place(buffer: deep_ep.Buffer) -> None:
    """On the proxy path the kernels write low-latency results into tensors
    made once per shape and call parity (nothing copied, nothing read on the
    host: a CUDA graph can hold them): dispatch n and n + 2 hand out the same
    tensors, n and n + 1 different ones; a combine sums into `out` itself."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = (np.arange(2 * 128, dtype=np.float32).reshape(2, 128) % 7).astype(ml_dtypes.bfloat16)
    idx = np.array([[0, 1], [2, -1]], np.int64)
    w = np.array([[0.5, 0.25], [1.0, 0.0]], np.float32)
    calls = [buffer.low_latency_dispatch(x, idx, 16, 4, use_fp8=False) for _ in range(3)]
    (a, count_a, _, _, _), (b, _, _, _, _), (c, count_c, handle, _, _) = calls
    assert a is c and count_a is count_c
    assert a is not b
    assert count_c.tolist() == [1, 1, 1, 0]
    assert np.array_equal(a[0, 0].astype(np.float32), x[0].astype(np.float32))
    out = np.zeros((2, 128), ml_dtypes.bfloat16)
    combined, _, _ = buffer.low_latency_combine(c, idx, w, handle, out=out)
    assert combined is out
    want = x.astype(np.float32) * np.array([[0.75], [1.0]], np.float32)
    assert np.array_equal(out.astype(np.float32), want)
    # FP8 scales are laid out as DeepEP's: column-major in the last two dimensions.
    recv, _, _, _, _ = buffer.low_latency_dispatch(x, idx, 16, 4, use_fp8=True)
    scales = recv[1]
    assert scales.shape == (4, 16, 1) and scales.strides[1] == 4


def test_low_latency_outputs_bound_once(buffer: deep_ep.Buffer) -> None:
    """EpBuffer.bind_low_latency_outputs: a set of outputs imported once and
    named by its slot at each call receives like out_* tensors; a slot out
    of range, an empty slot, or a slot together with out_* is refused,
    naming it."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = (np.arange(2 * 128, dtype=np.float32).reshape(2, 128) % 7).astype(ml_dtypes.bfloat16)
    idx = np.array([[0, 1], [2, -1]], np.int64)
    buffer.low_latency_dispatch(x, idx, 16, 4, use_fp8=False)  # makes the native Buffer
    native = next(iter(buffer._ll.values()))
    out_x = np.zeros((4, 16, 128), ml_dtypes.bfloat16)
    count = np.full(4, -1, np.int32)
    src = np.zeros((4, 16), np.int32)
    ranges = np.zeros((4, 1), np.int64)
    view = courier.DtypeView(out_x.view(np.uint16), "bfloat16")
    native.bind_low_latency_outputs(3, view, None, count, src, ranges)
    del view
    bits = courier.DtypeView(x.view(np.uint16), "bfloat16")
    result = native.low_latency_dispatch(bits, idx, outputs=3)
    assert result.packed_recv_x is None  # the caller holds its tensors
    assert count.tolist() == [1, 1, 1, 0]
    assert np.array_equal(out_x[0, 0].astype(np.float32), x[0].astype(np.float32))
    with pytest.raises(courier.Error, match="outputs slot 4 is not in 0..3"):
        native.bind_low_latency_outputs(4, None, None, None, None, None)
    with pytest.raises(courier.Error, match="outputs slot 2 has no tensors bound"):
        native.low_latency_dispatch(courier.DtypeView(x.view(np.uint16), "bfloat16"), idx,
                                    outputs=2)
    with pytest.raises(courier.Error, match="out_\\* tensors or an outputs slot, not both"):
        native.low_latency_dispatch(courier.DtypeView(x.view(np.uint16), "bfloat16"), idx,
                                    out_count=count, outputs=3)


class _FakeCuda:
    """torch.cuda as _comm_to_follow sees it: a current raw stream per
    device and which streams are being captured."""

    def __init__(self) -> None:
        self.current = 7
        self.capturing: set = set()

    def is_current_stream_capturing(self) -> bool:
        return self.current in self.capturing

    def stream(self, stream):
        cuda = self

        class Switch:
            def __enter__(self):
                self.saved, cuda.current = cuda.current, stream.raw

            def __exit__(self, *exc):
                cuda.current = self.saved

        return Switch()


def test_low_latency_calls_follow_the_comm_stream_once_per_stream() -> None:
    # Which calls wait for work an async_finish call left on the comm stream:
    # each other stream once; never across a CUDA graph capture boundary.
    cuda = _FakeCuda()
    fake_torch = types.SimpleNamespace(cuda=cuda)
    class Device:
        index = 0

    device = Device()
    kind = types.SimpleNamespace(torch=fake_torch, device=device, raw_stream=lambda: cuda.current)
    comm = types.SimpleNamespace(raw=99)
    owner = types.SimpleNamespace(_comm_pending={}, _comm_streams={device: comm})
    follow = lambda call_comm=None: deep_ep.Buffer._comm_to_follow(owner, kind, call_comm)  # noqa: E731

    assert follow() is None  # nothing left there yet
    assert follow(comm) is None  # an async_finish call: work on the comm stream
    assert follow() is comm  # the current stream waits once
    assert follow() is None
    cuda.current = 8
    assert follow() is comm  # another stream waits too
    # Work queued before a capture is not followed from inside it.
    cuda.current = 7
    follow(comm)
    cuda.capturing = {7}
    assert follow() is None
    # Work captured on the comm stream is followed inside the same capture...
    cuda.capturing = {7, 99}
    follow(comm)
    assert follow() is comm
    # ...but not after the capture ended, nor from another capture.
    follow(comm)
    cuda.capturing = {7}
    assert follow() is None
    cuda.capturing = set()
    assert follow() is None
