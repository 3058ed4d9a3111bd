"""courier.deep_ep: DeepEP's public ``Buffer`` API on Courier.

Code written against DeepEP runs unchanged apart from the import::

    from courier import deep_ep        # instead of: import deep_ep
    buffer = deep_ep.Buffer(group, num_nvl_bytes, num_rdma_bytes)

Tensors are torch tensors (CPU or CUDA) or, on the host backend, numpy
arrays; results come back as the same kind as the input. bfloat16 and FP8
numpy arrays use the ``ml_dtypes`` types. What differs from DeepEP, argument
by argument, is in docs/python.md: arguments that only tune performance or
scheduling are accepted; arguments whose meaning Courier cannot honour raise
``ValueError`` naming the argument; failures of the C++ side raise
``courier.Error`` with its message (``courier.CallRefused``, a subclass, when
every rank refused a collective call together and the Buffer stays usable).
"""

from __future__ import annotations

import os
import struct
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _courier
from ._courier import CallRefused, Error

__all__ = [
    "Buffer",
    "CallRefused",
    "Config",
    "EventOverlap",
    "Error",
]

#: A numpy array or a torch tensor.
Tensor = Any

_FP8_BLOCK = 128  # channels per FP8 scale


def __getattr__(name: str) -> Any:
    """``topk_idx_t``: the dtype of ``topk_idx`` (as ``deep_ep.topk_idx_t``):
    ``torch.int64`` when torch is imported, else ``numpy.int64``."""
    if name == "topk_idx_t":
        torch = _torch_module()
        return torch.int64 if torch is not None else np.int64
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ----------------------------------------------------------------------------
# Tensors: numpy or torch in, the same kind out.


def _torch_module() -> Any:
    """torch if the program imported it (a torch tensor can only come from
    there), else None: torch stays optional."""
    return sys.modules.get("torch")


def _is_torch(tensor: Any) -> bool:
    torch = _torch_module()
    return torch is not None and isinstance(tensor, torch.Tensor)


def _ml_dtypes() -> Any:
    try:
        import ml_dtypes  # type: ignore[import-not-found]
    except ImportError:
        return None
    return ml_dtypes


def _numpy_dtype_name(array: np.ndarray) -> str:
    return array.dtype.name


def _to_dlpack(tensor: Any) -> Any:
    return _torch_module().utils.dlpack.to_dlpack(tensor)


_EXCHANGE_TYPES: Dict[type, bool] = {}


def _exchanges(tensor_type: type) -> bool:
    """Whether the bridge takes tensors of this type through DLPack's C
    exchange API (torch 2.10 and later publish it on torch.Tensor), as the
    bridge itself decides (a table it can read, of version 1.x). Asked once
    per type (a type publishes its table when it is made)."""
    known = _EXCHANGE_TYPES.get(tensor_type)
    if known is None:
        known = _EXCHANGE_TYPES[tensor_type] = _courier.has_dlpack_exchange_api(tensor_type)
    return known


def _to_courier(tensor: Optional[Tensor], name: str) -> Any:
    """What the C++ bridge reads, for one call: a torch tensor itself where
    torch publishes DLPack's C exchange API (the bridge takes it in tens of
    nanoseconds, without a Python call), else its DLPack capsule (torch's
    to_dlpack: its __dlpack__ spends microseconds per tensor on stream
    bookkeeping Courier does itself); a numpy array (it has __dlpack__); or
    a DtypeView of the bits where the framework cannot export the dtype. A
    DtypeView passes as it is."""
    if tensor is None:
        return None
    # (Inlined lookups: this runs for every tensor of every call.)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(tensor, torch.Tensor):
        if _exchanges(type(tensor)):
            return tensor
        if tensor.requires_grad:
            tensor = tensor.detach()  # torch exports no tensor that requires grad
        if tensor.dtype == torch.float8_e4m3fn:
            return _courier.DtypeView(_to_dlpack(tensor.view(torch.uint8)), "float8_e4m3fn")
        return _to_dlpack(tensor)
    if isinstance(tensor, _courier.DtypeView):
        return tensor
    if isinstance(tensor, np.ndarray):
        dtype = _numpy_dtype_name(tensor)
        if dtype == "bfloat16":
            return _courier.DtypeView(tensor.view(np.uint16), "bfloat16")
        if dtype == "float8_e4m3fn":
            return _courier.DtypeView(tensor.view(np.uint8), "float8_e4m3fn")
        return tensor
    raise TypeError(f"{name}: expected a numpy array or a torch tensor, got {type(tensor).__name__}")


def _crossing(tensor: Optional[Tensor], name: str, exchange_type: Optional[type]) -> Any:
    """_to_courier for the hot calls: a tensor of x's type, when x crosses
    through the C exchange API (`exchange_type`), passes as it is without
    the lookups; anything else as _to_courier makes it."""
    return tensor if type(tensor) is exchange_type else _to_courier(tensor, name)


class _Kind:
    """Where results go: numpy arrays, or torch tensors on the input's device."""

    def __init__(self, like: Tensor, name: str, can_set_stream: bool = False,
                 can_copy_result: bool = False) -> None:
        """`like`'s kind; the GPU plugin's capabilities (the same for every
        native Buffer of a context) decide what its calls can do. Buffers
        make one per tensor type and device (Buffer._kind_of)."""
        torch = sys.modules.get("torch")  # as _is_torch, inlined
        if torch is not None and isinstance(like, torch.Tensor):
            self.torch, self.device = torch, like.device
            # The native call can read the current stream itself (DLPack's
            # C exchange API) instead of being told it from Python.
            self.exchanges = _exchanges(type(like))
            # A tensor of this type crosses as itself (_crossing).
            self.exchange_type = type(like) if self.exchanges else None
            # Kernels can go to a stream of the caller's (or a comm stream).
            self.streams = self.device.type == "cuda" and can_set_stream
            # The native call follows the current stream by itself.
            self.follows = self.streams and self.exchanges
            # The native call hands out results the caller owns (kind.results).
            self.owns = self.exchanges and can_copy_result
            return
        if not isinstance(like, np.ndarray):
            raise TypeError(f"{name}: expected a numpy array or a torch tensor, got "
                            f"{type(like).__name__}")
        self.torch, self.device, self.exchanges, self.exchange_type = None, None, False, None
        self.streams = self.follows = self.owns = False

    def wait_for_producer(self, previous_event: Optional["EventOverlap"] = None) -> None:
        """For kernels on a stream of their own: let the caller's stream
        finish writing the inputs first, and the work `previous_event` stands
        for (recorded on any stream), on the host."""
        if previous_event is not None and previous_event.event is not None and hasattr(
                previous_event.event, "synchronize"):
            previous_event.event.synchronize()
        if self.torch is not None and self.device.type == "cuda":
            self.torch.cuda.current_stream(self.device).synchronize()

    def order_after_producer(self, native: _courier.EpBuffer,
                             previous_event: Optional["EventOverlap"] = None,
                             comm: Any = None, after: Any = None,
                             native_follows: bool = False) -> bool:
        """Before a call of `native`: its kernels go on the caller's current
        stream, behind the inputs' producers, behind `previous_event` (a
        wait on the GPU, not the host) and behind the stream `after` (the
        Buffer's comm stream, where earlier calls may still run); or, with
        `comm` (the Buffer's comm stream), there, behind the current
        stream's work so far. For numpy and CPU tensors, or an older GPU
        plugin, wait_for_producer instead.

        Returns True when the native call is to follow the current stream
        itself (`follow_stream`): in the usual call (no comm stream, nothing
        to follow, no event), where the caller offers that (`native_follows`)
        and torch publishes DLPack's C exchange API."""
        if not self.streams:
            self.wait_for_producer(previous_event)
            return False
        if comm is None and after is None and (previous_event is None or
                                               previous_event.event is None):
            if native_follows and self.follows:
                return True
            # The usual call: the raw current stream is all it takes.
            native.set_stream(self.raw_stream())
            return False
        stream = self.torch.cuda.current_stream(self.device)
        if previous_event is not None and previous_event.event is not None:
            stream.wait_event(previous_event.event)
        if after is not None and after != stream:
            stream.wait_stream(after)
        if comm is not None:
            comm.wait_stream(stream)
            stream = comm
        native.set_stream(stream.cuda_stream)
        return False

    def raw_stream(self) -> int:
        """The current CUDA stream's handle on kind's device, without making
        a torch.cuda.Stream object (microseconds each)."""
        torch = self.torch
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is None:
            return torch.cuda.current_stream(self.device).cuda_stream
        index = self.device.index
        return raw(index if index is not None else torch.cuda.current_device())

    def finish_on(self, comm: Any, async_finish: bool, inputs: Tuple[Any, ...]) -> "EventOverlap":
        """After a call whose kernels went to `comm` (or None: the current
        stream, see event()): the caller's tensors it reads are marked as used
        there (torch's allocator then keeps their memory until it is done),
        and with async_finish the event recorded there is returned (with the
        tensors, as DeepEP's); otherwise the current stream waits for it."""
        if comm is None:
            return self.event(async_finish)
        for tensor in inputs:
            if tensor is not None:
                tensor.record_stream(comm)
        if not async_finish:
            self.torch.cuda.current_stream(self.device).wait_stream(comm)
            return EventOverlap()
        event = self.torch.cuda.Event()
        event.record(comm)
        return EventOverlap(event, tuple(t for t in inputs if t is not None))

    def event(self, async_finish: bool) -> "EventOverlap":
        """With async_finish, an event after the work queued so far on the
        caller's stream (the copies handing out results); otherwise, and for
        numpy and CPU tensors, an empty one. DeepEP's event is valid only
        with async_finish too, and recording one costs tens of microseconds
        of host time per call."""
        if async_finish and self.torch is not None and self.device.type == "cuda":
            event = self.torch.cuda.Event()
            event.record(self.torch.cuda.current_stream(self.device))
            return EventOverlap(event)
        return EventOverlap()

    def view(self, ref: Optional[_courier.TensorRef]) -> Optional[Tensor]:
        """A zero-copy array over a Buffer view."""
        if ref is None:
            return None
        if self.torch is not None:
            # From the capsule, not the object: Courier has finished writing
            # when its call returns, so torch's stream handshake (a
            # current_stream lookup per view, a visible cost per call) has
            # nothing to order.
            torch = self.torch
            if ref.dtype == "float8_e4m3fn":
                bits = torch.from_dlpack(ref.reinterpret("uint8").__dlpack__())
                return bits.view(torch.float8_e4m3fn)
            return torch.from_dlpack(ref.__dlpack__())
        if ref.dtype in ("bfloat16", "float8_e4m3fn"):
            bits = np.from_dlpack(ref.reinterpret("uint16" if ref.dtype == "bfloat16" else "uint8"))
            ml = _ml_dtypes()
            return bits.view(getattr(ml, ref.dtype)) if ml is not None else bits
        return np.from_dlpack(ref)

    def results(self, out: Any, with_topk: bool) -> Tuple[Any, ...]:
        """A high-throughput dispatch's (recv_x, recv_x_scales,
        recv_topk_idx, recv_topk_weights, num_recv_tokens_per_expert,
        native handle), the tensors owned (see owned), the top-k ones None
        without top-k."""
        results = out.as_tuple()
        if not isinstance(results[0], _courier.TensorRef):
            return results  # made owned by the native call
        topk = results[2:4] if with_topk else (None, None)
        return (self.owned(results[0]), self.owned(results[1]), self.owned(topk[0]),
                self.owned(topk[1])) + results[4:]

    def owned(self, ref: Any) -> Optional[Tensor]:
        """A copy the caller owns (DeepEP hands out fresh tensors; Courier's
        views are reused by the next call). A result the native call made
        owned already (`owned=True`: a tensor allocated through DLPack's C
        exchange API and filled on the stream) passes as it is."""
        if ref is not None and not isinstance(ref, _courier.TensorRef):
            return ref
        array = self.view(ref)
        if array is None:
            return None
        return array.clone() if self.torch is not None else array.copy()

    def empty(self, shape: Sequence[int], dtype: str) -> Tensor:
        if self.torch is not None:
            torch = self.torch
            return torch.empty(tuple(shape), dtype=getattr(torch, dtype), device=self.device)
        if dtype in ("bfloat16", "float8_e4m3fn"):
            ml = _ml_dtypes()
            if ml is None:
                raise Error(f"a {dtype} numpy array needs the ml_dtypes package (pip install "
                            "ml_dtypes)")
            return np.empty(tuple(shape), dtype=getattr(ml, dtype))
        return np.empty(tuple(shape), dtype=np.dtype(dtype))

    def padded(self, array: Optional[Tensor], rows: int, fill: float, call: str) -> Optional[Tensor]:
        """`array` with `rows` rows: its own, then `fill` (num_worst_tokens)."""
        if array is None or rows == 0:
            return array
        have = int(array.shape[0])
        if have > rows:
            raise Error(f"{call}: {have} rows were received, more than num_worst_tokens {rows}")
        shape = (rows,) + tuple(array.shape[1:])
        if self.torch is not None:
            out = self.torch.full(shape, fill, dtype=array.dtype, device=array.device)
        else:
            out = np.full(shape, fill, dtype=array.dtype)
        out[:have] = array
        return out

    def output(self, shape: Sequence[int], dtype: str) -> Tuple[Tensor, Any]:
        """A tensor for Courier to write into, and what to give _to_courier
        for it at each call. numpy without ml_dtypes holds bfloat16 and FP8
        as raw bits."""
        if self.torch is None and dtype in ("bfloat16", "float8_e4m3fn") and _ml_dtypes() is None:
            raw = np.empty(tuple(shape), np.uint16 if dtype == "bfloat16" else np.uint8)
            return raw, _courier.DtypeView(raw, dtype)
        array = self.empty(shape, dtype)
        return array, array

    def transposed(self, storage: Tensor) -> Tensor:
        """The last two dimensions swapped, a view (column-major scales)."""
        if self.torch is not None:
            return storage.transpose(-1, -2)
        return storage.swapaxes(-1, -2)


def _pack_ue8m0(kind: _Kind, scales: Tensor) -> Tensor:
    """DeepEP's UE8M0 scales from power-of-two float32 ones ``[e, rows, S]``:
    each scale's exponent byte (the float's bits 23..30), four per int32,
    scale 4p + b in byte b of column p (little-endian), ``[e, rows, ceil(S /
    4)]``, zero bytes past S."""
    if len(scales.shape) == 2:  # [rows, S]: high-throughput
        return _pack_ue8m0(kind, scales[None])[0]
    e, rows, s = (int(d) for d in scales.shape)
    packs = -(-s // 4)
    if kind.torch is not None:
        torch = kind.torch
        exponents = (scales.contiguous().view(torch.int32) >> 23).to(torch.uint8)
        padded = torch.zeros((e, rows, packs * 4), dtype=torch.uint8, device=scales.device)
        padded[..., :s] = exponents
        return padded.view(torch.int32)
    exponents = (np.ascontiguousarray(scales, dtype=np.float32).view(np.int32) >> 23).astype(np.uint8)
    padded = np.zeros((e, rows, packs * 4), np.uint8)
    padded[..., :s] = exponents
    return padded.view("<i4")


def _unpack_ue8m0(kind: _Kind, packed: Tensor, count: int) -> Tensor:
    """The float32 scales ``[rows, count]`` of UE8M0 ones ``[rows,
    ceil(count / 4)]`` int32 (_pack_ue8m0's layout): 2^(byte - 127)."""
    if kind.torch is not None:
        torch = kind.torch
        exponents = packed.contiguous().view(torch.uint8)[:, :count].to(torch.int32)
        return (exponents << 23).view(torch.float32)
    exponents = np.ascontiguousarray(packed).view(np.uint8)[:, :count].astype(np.int32)
    return np.ascontiguousarray(exponents << 23).view(np.float32)


def _rows(tensor: Tensor) -> int:
    return int(tensor.shape[0])


def _element_bytes(x: Tensor) -> int:
    """Bytes of a Buffer row element for x: 4 for float32, 2 otherwise
    (bfloat16; FP8 rows travel in bfloat16-sized slots)."""
    return 4 if x.itemsize == 4 else 2  # the dtype itself is checked by the Buffer


def _dtype_name(x: Tensor) -> str:
    """bfloat16, float32, float8_e4m3fn, ... for torch and numpy alike."""
    if isinstance(x, np.ndarray):
        return _numpy_dtype_name(x)
    return str(x.dtype).replace("torch.", "")


_DTYPE_CODES: Dict[Any, int] = {}


def _dtype_code(x: Tensor) -> int:
    """1 bfloat16, 2 float32, 3 float8_e4m3fn, 0 another dtype (a Buffer
    configuration's key; worked out once per dtype)."""
    dtype = x.dtype
    code = _DTYPE_CODES.get(dtype)
    if code is None:
        name = str(dtype).replace("torch.", "")
        code = _DTYPE_CODES[dtype] = {"bfloat16": 1, "float32": 2, "float8_e4m3fn": 3}.get(name, 0)
    return code


# ----------------------------------------------------------------------------
# DeepEP's helper types.


class EventOverlap:
    """DeepEP's event wrapper. With ``async_finish`` and torch CUDA tensors
    it holds the event recorded after the call's work (low-latency calls:
    on the Buffer's comm stream; high-throughput calls: on the caller's
    stream, after the copies that hand out the results), so
    ``current_stream_wait`` (and leaving a ``with`` block) makes the current
    stream wait for it, as with DeepEP. Otherwise it is empty: the results
    are ordered on the caller's stream already."""

    def __init__(self, event: Any = None, extra_tensors: Optional[Tuple[Any, ...]] = None) -> None:
        """``event``: an event handle (kept, not waited on); ``extra_tensors``:
        tensors kept alive with the event."""
        self.event = event
        self.extra_tensors = extra_tensors

    def current_stream_wait(self) -> None:
        """Make the current stream wait for the event (a torch.cuda.Event);
        an empty event has nothing to wait for."""
        if self.event is not None and hasattr(self.event, "record"):
            torch = _torch_module()
            torch.cuda.current_stream().wait_event(self.event)

    def __enter__(self) -> "EventOverlap":
        return self

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        self.current_stream_wait()


class Config:
    """DeepEP's performance configuration (SMs, chunk sizes). Courier keeps
    the values and validates them, but its kernels size their own work:
    a Config never changes results."""

    def __init__(
        self,
        num_sms: int = 20,
        num_max_nvl_chunked_send_tokens: int = 6,
        num_max_nvl_chunked_recv_tokens: int = 256,
        num_max_rdma_chunked_send_tokens: int = 6,
        num_max_rdma_chunked_recv_tokens: int = 256,
    ) -> None:
        """The same positional arguments as DeepEP's Config."""
        values = {
            "num_sms": num_sms,
            "num_max_nvl_chunked_send_tokens": num_max_nvl_chunked_send_tokens,
            "num_max_nvl_chunked_recv_tokens": num_max_nvl_chunked_recv_tokens,
            "num_max_rdma_chunked_send_tokens": num_max_rdma_chunked_send_tokens,
            "num_max_rdma_chunked_recv_tokens": num_max_rdma_chunked_recv_tokens,
        }
        for name, value in values.items():
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"Config: {name} must be a positive integer, got {value!r}")
        if num_max_nvl_chunked_send_tokens >= num_max_nvl_chunked_recv_tokens:
            raise ValueError(
                "Config: num_max_nvl_chunked_send_tokens "
                f"{num_max_nvl_chunked_send_tokens} must be below "
                f"num_max_nvl_chunked_recv_tokens {num_max_nvl_chunked_recv_tokens}")
        self.num_sms = num_sms
        self.num_max_nvl_chunked_send_tokens = num_max_nvl_chunked_send_tokens
        self.num_max_nvl_chunked_recv_tokens = num_max_nvl_chunked_recv_tokens
        self.num_max_rdma_chunked_send_tokens = num_max_rdma_chunked_send_tokens
        self.num_max_rdma_chunked_recv_tokens = num_max_rdma_chunked_recv_tokens

    def get_nvl_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        """Bytes for num_nvl_bytes. Informational: Courier sizes its
        high-throughput memory from the calls themselves (docs/python.md)."""
        return num_ranks * self.num_max_nvl_chunked_recv_tokens * (hidden_bytes + 64) * max(
            self.num_sms // 2, 1)

    def get_rdma_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        """Bytes for num_rdma_bytes in high-throughput mode. Informational, as
        get_nvl_buffer_size_hint."""
        return num_ranks * self.num_max_rdma_chunked_recv_tokens * (hidden_bytes + 64) * max(
            self.num_sms // 2, 1)

    def __repr__(self) -> str:
        return (f"Config({self.num_sms}, {self.num_max_nvl_chunked_send_tokens}, "
                f"{self.num_max_nvl_chunked_recv_tokens}, {self.num_max_rdma_chunked_send_tokens}, "
                f"{self.num_max_rdma_chunked_recv_tokens})")


class _HtSite:
    """A high-throughput native Buffer and what its dispatch handles share:
    its capacity in tokens per rank, its configuration key (hidden, dtype
    code, top-k, experts) and this rank."""

    __slots__ = ("buffer", "capacity", "key", "rank")

    def __init__(self, buffer: _courier.EpBuffer, capacity: int, key: Tuple[int, ...],
                 rank: int) -> None:
        self.buffer, self.capacity, self.key, self.rank = buffer, capacity, key, rank


class DispatchHandle(tuple):
    """DeepEP's high-throughput handle: a tuple indexable as DeepEP's
    intranode one, ``(rank_prefix_matrix, channel_prefix_matrix,
    recv_channel_prefix_matrix, recv_src_idx, is_token_in_rank, send_head)``,
    carrying Courier's own handle for combine and a cached dispatch (pass it
    back as is).

    Where Courier's internals differ (docs/python.md):

    - ``[0]`` rank_prefix_matrix, ``[num_ranks, num_ranks]`` int32 like the
      input: column ``rank`` is DeepEP's (entry ``[i][rank]``: rows this rank
      received from ranks 0..i, its rows being grouped by source rank in rank
      order, as DeepEP's are); the other columns are -1, since they count
      other ranks' rows and Courier does not gather them. Built on first
      access, from counts the host already has.
    - ``[4]`` is_token_in_rank: the tensor the dispatch was given.
    - ``[1]``, ``[2]``, ``[3]``, ``[5]``: None. They describe DeepEP's
      per-channel kernels and its source-index bookkeeping, which Courier
      does not have (its combine finds rows through its own handle).
    """

    native: _courier.DispatchHandle
    num_worst_tokens: int = 0  # rows of recv_x when padded, else 0
    _site: "_HtSite"  # the native Buffer the dispatch ran on
    _kind: Optional["_Kind"] = None
    _rank_prefix_matrix: Optional[Tensor] = None  # [0], built on first access

    def __new__(cls, native: _courier.DispatchHandle, site: "_HtSite",
                is_token_in_rank: Optional[Tensor], num_worst_tokens: int = 0,
                kind: Optional["_Kind"] = None) -> "DispatchHandle":
        # (Few attributes of its own: one is made per dispatch.)
        handle = super().__new__(cls, (None, None, None, None, is_token_in_rank, None))
        handle.native = native
        handle._site = site
        handle._kind = kind
        if num_worst_tokens:
            handle.num_worst_tokens = num_worst_tokens
        return handle

    @property
    def buffer(self) -> _courier.EpBuffer:
        return self._site.buffer

    @property
    def capacity(self) -> int:
        """The Buffer's tokens per rank."""
        return self._site.capacity

    @property
    def key(self) -> Tuple[int, ...]:
        """The configuration (hidden, dtype code, top-k, experts)."""
        return self._site.key

    @property
    def is_token_in_rank(self) -> Optional[Tensor]:
        return tuple.__getitem__(self, 4)

    def _rank_prefix(self) -> Optional[Tensor]:
        if self.native.counts_on_device:
            raise Error("DispatchHandle[0]: the dispatch did not wait (num_worst_tokens on a CUDA "
                        "stream), so its received counts stay on the device and the host cannot "
                        "build rank_prefix_matrix")
        if self._rank_prefix_matrix is None and self._kind is not None:
            counts = list(self.native.recv_counts)
            matrix = np.full((len(counts), len(counts)), -1, dtype=np.int32)
            matrix[:, self._site.rank] = np.cumsum(np.asarray(counts, dtype=np.int64))
            kind = self._kind
            if kind.torch is not None:
                matrix = kind.torch.from_numpy(matrix).to(kind.device)
            self._rank_prefix_matrix = matrix
        return self._rank_prefix_matrix

    def _items(self) -> Tuple[Any, ...]:
        return (self._rank_prefix(),) + tuple(super().__iter__())[1:]

    def __getitem__(self, index: Any) -> Any:  # type: ignore[override]
        if isinstance(index, int) and index in (0, -len(self)):
            return self._rank_prefix()
        return self._items()[index] if isinstance(index, slice) else super().__getitem__(index)

    def __iter__(self) -> Any:
        return iter(self._items())

    def __reduce__(self) -> Any:
        raise TypeError("a dispatch handle belongs to its Buffer and cannot be pickled")


class _LowLatencyPlan:
    """What a low-latency dispatch's shapes and flags decide, worked out once
    per combination (Buffer._ll_plan): x's kind, the native Buffer, how the
    scales are laid out, the keys of its outputs per parity (_ll_outputs)."""

    __slots__ = ("kind", "buffer", "proxy", "use_fp8", "round_scale", "use_ue8m0",
                 "scales_layout", "max_tokens", "num_experts", "outputs", "_tail")

    def __init__(self, kind: "_Kind", buffer: _courier.EpBuffer, proxy: bool, use_fp8: bool,
                 round_scale: bool, use_ue8m0: bool, max_tokens: int, hidden: int,
                 num_experts: int, x: Tensor) -> None:
        self.kind, self.buffer, self.proxy = kind, buffer, proxy
        self.use_fp8, self.round_scale, self.use_ue8m0 = use_fp8, round_scale, use_ue8m0
        self.scales_layout = (("ue8m0" if use_ue8m0 else "column_major") if use_fp8
                              else "row_major")
        self.max_tokens, self.num_experts = max_tokens, num_experts
        device = kind.device if kind.torch is not None else "numpy"
        dtype = None if use_fp8 else x.dtype
        self.outputs = tuple((buffer, device, use_ue8m0, parity, dtype) for parity in (0, 1))
        self._tail = (max_tokens, hidden, num_experts)

    def handle_items(self, src_info: Tensor, layout_range: Tensor) -> Tuple[Any, ...]:
        """The items of the dispatch's LowLatencyHandle."""
        return (src_info, layout_range) + self._tail


class LowLatencyHandle(tuple):
    """DeepEP's low-latency handle: the tuple ``(packed_recv_src_info,
    packed_recv_layout_range, num_max_dispatch_tokens_per_rank, hidden,
    num_experts)``, carrying Courier's own handle for low_latency_combine."""

    native: _courier.LowLatencyHandle
    buffer: _courier.EpBuffer
    recv_count: Optional[Tensor]  # kept alive: the combine's kernels read it

    combine_buffer = None  # get_next_low_latency_combine_buffer's tensor, made on request

    def __new__(cls, items: Tuple[Any, ...], native: _courier.LowLatencyHandle,
                buffer: _courier.EpBuffer, recv_count: Optional[Tensor] = None
                ) -> "LowLatencyHandle":
        handle = super().__new__(cls, items)
        handle.native = native
        handle.buffer = buffer
        handle.recv_count = recv_count
        return handle


# ----------------------------------------------------------------------------
# The job: environment or a process group.


def _is_torch_process_group(group: Any) -> bool:
    """Whether `group` is a torch.distributed ProcessGroup. torch is looked
    up, not imported: a ProcessGroup can only come from a program that
    imported torch.distributed already."""
    dist = sys.modules.get("torch.distributed")
    process_group = getattr(dist, "ProcessGroup", None) if dist is not None else None
    return isinstance(process_group, type) and isinstance(group, process_group)


def _group_bootstrap(group: Any) -> _courier.CallbackBootstrap:
    """A Courier bootstrap whose collectives go through `group`: a
    torch.distributed process group (all-gather of a uint8 tensor on the
    group's device), or an object with rank(), size(), allgather(bytes) ->
    bytes and barrier()."""
    # A ProcessGroup has allgather() and barrier() methods of its own (tensor
    # lists, work handles): it must be recognised before the plain protocol.
    if _is_torch_process_group(group):
        return _torch_group_bootstrap(group)
    if all(callable(getattr(group, name, None))
           for name in ("rank", "size", "allgather", "barrier")):
        return _courier.CallbackBootstrap(int(group.rank()), int(group.size()), group.allgather,
                                          group.barrier)
    raise TypeError(
        f"group: a {type(group).__name__} is neither a torch.distributed process group nor "
        "an object with rank(), size(), allgather(bytes) and barrier()")


def _torch_group_bootstrap(group: Any) -> _courier.CallbackBootstrap:
    """The bootstrap of a torch.distributed process group: all_gather of a
    uint8 tensor on the group's device (CUDA for NCCL) and barrier."""
    torch = _torch_module()
    import torch.distributed as dist

    size = dist.get_world_size(group)
    rank = dist.get_rank(group)
    backend = str(dist.get_backend(group)).lower()
    device = (torch.device("cuda", torch.cuda.current_device())
              if "nccl" in backend else torch.device("cpu"))

    def allgather(block: bytes) -> bytes:
        if len(block) == 0:
            dist.barrier(group=group)
            return b""
        mine = torch.frombuffer(bytearray(block), dtype=torch.uint8).to(device)
        blocks = [torch.empty_like(mine) for _ in range(size)]
        dist.all_gather(blocks, mine, group=group)
        return b"".join(bytes(b.cpu().numpy().tobytes()) for b in blocks)

    def barrier() -> None:
        dist.barrier(group=group)

    return _courier.CallbackBootstrap(rank, size, allgather, barrier)


def _check_accepted(call: str, **flags: Tuple[Any, Any]) -> None:
    """Raise ValueError for an argument whose value Courier cannot honour:
    each flag is (value, the only accepted value)."""
    for name, (value, accepted) in flags.items():
        if value != accepted:
            raise ValueError(f"{call}: {name}={value!r} is not supported by Courier "
                             f"(only {accepted!r}; see docs/python.md)")


def _low_latency_bytes(max_tokens: int, hidden: int, num_ranks: int, num_experts: int,
                       element_bytes: int) -> int:
    """Bytes of Courier's low-latency window (the proxy path's layout, which
    the direct path fits in): send, receive and combine rows, source
    indices, per-rank records."""
    def align(v: int) -> int:
        return (v + 63) // 64 * 64

    local_experts = max(num_experts // max(num_ranks, 1), 1)
    slots = num_ranks * local_experts * max_tokens
    row = hidden * element_bytes
    record = 8 * (local_experts + 1)
    size = align(slots * row)          # send rows
    size = align(size + slots * 4)     # send source indices
    size = align(size + num_ranks * record)
    size = align(size + 2 * slots * row)  # receive rows, two parities
    size = align(size + 2 * slots * 4)
    size = align(size + 2 * slots * row)  # combine rows
    return size + 4 * num_ranks * record


# ----------------------------------------------------------------------------
# The Buffer.


class Buffer:
    """DeepEP's expert-parallel Buffer on Courier: high-throughput
    dispatch/combine, low-latency dispatch/combine, and the layout.

    Attributes:
        num_sms: SMs for high-throughput kernels (kept; Courier sizes its own).
        rank: this rank in the group.
        group_size: the number of ranks.
        group: the process group given (None: the environment's job).
        num_nvl_bytes, num_rdma_bytes: the sizes given.
        low_latency_mode: whether low-latency calls are allowed.
        context: the courier.Context underneath.
    """

    num_sms: int = 20

    def __init__(
        self,
        group: Any = None,
        num_nvl_bytes: int = 0,
        num_rdma_bytes: int = 0,
        low_latency_mode: bool = False,
        num_qps_per_rank: int = 24,
        allow_nvlink_for_low_latency_mode: bool = True,
        allow_mnnvl: bool = False,
        explicitly_destroy: bool = False,
        comm: Any = None,
        *,
        use_fabric: bool = False,
        enable_shrink: bool = False,
        env: Optional[Dict[str, str]] = None,
    ) -> None:
        """Collective: join the group's ranks and set up the Buffer.

        Arguments as DeepEP's, in DeepEP v1.2.1's positional order
        (``explicitly_destroy`` 8th, ``comm`` 9th); ``use_fabric`` and
        ``enable_shrink``, which its later versions added, by keyword. ``group``: a torch.distributed process group
        (Courier's bootstrap then all-gathers through it), or None to join
        the job the environment names (courier-run, torchrun). Courier only
        (keyword): ``env``, COURIER_* settings that override the process
        environment, e.g. ``{"COURIER_OFI_PROVIDER": "tcp"}``.
        """
        for name, value in (("num_nvl_bytes", num_nvl_bytes), ("num_rdma_bytes", num_rdma_bytes)):
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"Buffer: {name} must be a non-negative integer, got {value!r}")
        if not isinstance(num_qps_per_rank, int) or num_qps_per_rank <= 0:
            raise ValueError(f"Buffer: num_qps_per_rank must be positive, got {num_qps_per_rank!r}")
        _check_accepted("Buffer", enable_shrink=(enable_shrink, False), comm=(comm, None))
        bootstrap = _group_bootstrap(group) if group is not None else None
        env = dict(env or {})
        cuda = getattr(_torch_module(), "cuda", None)
        if (cuda is not None and "COURIER_GPU_DEVICE" not in env and
                "COURIER_GPU_DEVICE" not in os.environ and cuda.is_available() and
                cuda.is_initialized()):
            # The GPU the caller set for this process (torch.cuda.set_device),
            # not LOCAL_RANK: under mp.spawn there is no LOCAL_RANK.
            env["COURIER_GPU_DEVICE"] = str(cuda.current_device())
        self.context = _courier.Context(env=env, bootstrap=bootstrap)
        self.rank: int = self.context.rank
        self.group_size: int = self.context.world_size
        # [ranks, hosts] membership when the ranks span hosts (for
        # num_tokens_per_rdma_rank), else None.
        rank_hosts = list(self.context.rank_hosts)
        self._host_member: Optional[np.ndarray] = None
        if max(rank_hosts) > 0:
            self._host_member = np.zeros((self.group_size, max(rank_hosts) + 1), np.int32)
            self._host_member[np.arange(self.group_size), rank_hosts] = 1
        self.group = group
        self.num_nvl_bytes = num_nvl_bytes
        self.num_rdma_bytes = num_rdma_bytes
        self.low_latency_mode = low_latency_mode
        self.num_qps_per_rank = num_qps_per_rank
        self.allow_nvlink_for_low_latency_mode = allow_nvlink_for_low_latency_mode
        self.allow_mnnvl = allow_mnnvl
        self.use_fabric = use_fabric
        self.explicitly_destroy = explicitly_destroy
        self._layout = _courier.EpBuffer(self.context, num_nvl_bytes=num_nvl_bytes,
                                         num_rdma_bytes=num_rdma_bytes)
        # Courier's Buffers, made on first use: one per configuration a
        # call brings (each fixes hidden, dtype, top-k and experts), keyed by
        # it; high-throughput ones with their capacity in tokens per rank.
        self._ht: Dict[Tuple[int, ...], _HtSite] = {}
        self._ht_current: Optional[_HtSite] = None  # the last dispatch's
        self._ll: Dict[Tuple[int, ...], _courier.EpBuffer] = {}
        # The low-latency outputs per native Buffer and parity
        # (_ll_outputs), and each native Buffer's dispatches so far.
        self._ll_out: Dict[Tuple[Any, ...], Any] = {}
        self._ll_calls: Dict[Any, int] = {}
        self._ll_plans: Dict[Tuple[Any, ...], _LowLatencyPlan] = {}  # see _ll_plan
        # Low-latency dispatches so far, and those whose receive hooks have
        # not run yet (by number).
        self._ll_dispatches = 0
        self._ll_waiting_hooks: Dict[int, Any] = {}
        # Per device, the stream async_finish low-latency calls run on.
        self._comm_streams: Dict[Any, Any] = {}
        # Per device: a low-latency call left work on the comm stream that
        # later calls on other streams must wait for: [whether it was queued
        # under a CUDA graph capture, the raw streams that waited] (_comm_to_follow).
        self._comm_pending: Dict[Any, List[Any]] = {}
        # The GPU plugin's capabilities (every native Buffer of the context
        # has the same), and the _Kind of each tensor type and device.
        self._can_set_stream = self._layout.can_set_stream
        self._can_copy_result = self._layout.can_copy_result
        self._kinds: Dict[Tuple[type, Any], _Kind] = {}
        self._destroyed = False

    # -- lifetime -------------------------------------------------------------

    def destroy(self) -> None:
        """Collective: release the Buffer now (needs explicitly_destroy=True,
        as with DeepEP)."""
        if not self.explicitly_destroy:
            raise ValueError("Buffer.destroy: the Buffer was made without explicitly_destroy=True")
        self._release()

    def _release(self) -> None:
        if self._destroyed:
            return
        self._destroyed = True
        buffers = [site.buffer for site in self._ht.values()] + list(self._ll.values()) + [self._layout]
        for buffer in buffers:
            buffer.close()
        self._ht.clear()
        self._ht_current = None
        self._kinds.clear()
        self._ll.clear()
        self._ll_out.clear()
        self._ll_calls.clear()
        self._ll_plans.clear()
        self._comm_streams.clear()
        self._comm_pending.clear()
        self.context.barrier()

    def _kind_of(self, like: Tensor, name: str) -> _Kind:
        """`like`'s _Kind (made once per tensor type and device: every call
        needs one)."""
        key = (type(like), getattr(like, "device", None))
        kind = self._kinds.get(key)
        if kind is None:
            kind = _Kind(like, name, self._can_set_stream, self._can_copy_result)
            self._kinds[key] = kind
        return kind

    def _alive(self, call: str) -> None:
        if self._destroyed:
            raise Error(f"Buffer.{call}: the Buffer was destroyed")

    @property
    def transport(self) -> str:
        """How rows move: 'direct' (GPU stores within a host) or 'proxy'."""
        return self._layout.transport

    # -- DeepEP's static helpers -------------------------------------------------

    @staticmethod
    def is_sm90_compiled() -> bool:
        """True: DeepEP answers whether its kernels were built for SM90, which
        its FP8 paths need; Courier's FP8 dispatch works on every GPU backend
        (the host's too), so callers may take the FP8 path."""
        return True

    @staticmethod
    def set_num_sms(new_num_sms: int) -> None:
        """Set the SMs for high-throughput kernels (even, as with DeepEP). Kept
        for the default Configs; Courier's kernels size their own grids."""
        if not isinstance(new_num_sms, int) or new_num_sms <= 0 or new_num_sms % 2 != 0:
            raise ValueError(f"set_num_sms: the SM count must be even and positive, got "
                             f"{new_num_sms!r}")
        Buffer.num_sms = new_num_sms

    @staticmethod
    def capture() -> EventOverlap:
        """An event on the current CUDA stream (when torch with CUDA is in
        use), to pass as ``previous_event``; otherwise an empty one."""
        cuda = getattr(_torch_module(), "cuda", None)
        if cuda is not None and cuda.is_available() and cuda.is_initialized():
            event = cuda.Event()
            event.record(cuda.current_stream())
            return EventOverlap(event)
        return EventOverlap()

    @staticmethod
    def get_low_latency_rdma_size_hint(num_max_dispatch_tokens_per_rank: int, hidden: int,
                                       num_ranks: int, num_experts: int) -> int:
        """The least num_rdma_bytes for low-latency calls of up to
        num_max_dispatch_tokens_per_rank tokens of `hidden` bfloat16 values
        over num_experts experts: the size of Courier's low-latency window."""
        for name, value in (("num_max_dispatch_tokens_per_rank", num_max_dispatch_tokens_per_rank),
                            ("hidden", hidden), ("num_ranks", num_ranks),
                            ("num_experts", num_experts)):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"get_low_latency_rdma_size_hint: {name} must be positive, got "
                                 f"{value!r}")
        return _low_latency_bytes(num_max_dispatch_tokens_per_rank, hidden, num_ranks, num_experts,
                                  2)

    @staticmethod
    def get_dispatch_config(num_ranks: int) -> Config:
        """A dispatch Config for num_ranks (any positive number of ranks)."""
        if not isinstance(num_ranks, int) or num_ranks <= 0:
            raise ValueError(f"get_dispatch_config: num_ranks must be positive, got {num_ranks!r}")
        return Config(Buffer.num_sms, 6, 256, 6, 128)

    @staticmethod
    def get_combine_config(num_ranks: int) -> Config:
        """A combine Config for num_ranks (any positive number of ranks)."""
        if not isinstance(num_ranks, int) or num_ranks <= 0:
            raise ValueError(f"get_combine_config: num_ranks must be positive, got {num_ranks!r}")
        return Config(Buffer.num_sms, 6, 256, 6, 128)

    # -- layout -------------------------------------------------------------------

    def get_dispatch_layout(
        self,
        topk_idx: Tensor,
        num_experts: int,
        previous_event: Optional[EventOverlap] = None,
        async_finish: bool = False,
        allocate_on_comm_stream: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor], Tensor, Tensor, EventOverlap]:
        """Where the tokens of topk_idx ``[num_tokens, num_topk]`` int64 (-1:
        none) go. Returns (num_tokens_per_rank ``[num_ranks]`` int32,
        num_tokens_per_rdma_rank ``[num_hosts]`` int32 (tokens with a rank
        of each host among their destinations) when the ranks span hosts,
        else None as DeepEP's intranode layout, num_tokens_per_expert
        ``[num_experts]`` int32, is_token_in_rank ``[num_tokens, num_ranks]``
        bool, event). Local."""
        self._alive("get_dispatch_layout")
        kind = _Kind(topk_idx, "get_dispatch_layout: topk_idx")
        kind.wait_for_producer(previous_event)
        per_rank = kind.empty((self.group_size,), "int32")
        per_expert = kind.empty((int(num_experts),), "int32")
        in_rank = kind.empty((_rows(topk_idx), self.group_size), "bool")
        self._layout.get_dispatch_layout(_to_courier(topk_idx, "topk_idx"), int(num_experts),
                                         per_rank, per_expert, in_rank)
        per_host = None
        member = self._host_member
        if member is not None:  # a token counts once per host
            if kind.torch is not None:
                member = kind.torch.from_numpy(member).to(kind.device)
                per_host = ((in_rank.to(kind.torch.int32) @ member) > 0).sum(0).to(
                    kind.torch.int32)
            else:
                per_host = ((in_rank.astype(np.int32) @ member) > 0).sum(axis=0).astype(np.int32)
        return per_rank, per_host, per_expert, in_rank, kind.event(async_finish)

    # -- high-throughput ------------------------------------------------------------

    def _agree(self, record: Tuple[int, ...]) -> List[Tuple[int, ...]]:
        """Every rank's record (out of band, through the bootstrap)."""
        fmt = f"<{len(record)}q"
        all_bytes = self.context.allgather(struct.pack(fmt, *record))
        size = struct.calcsize(fmt)
        return [struct.unpack(fmt, all_bytes[r * size:(r + 1) * size])
                for r in range(self.group_size)]

    @staticmethod
    def _ht_key_of(x: Tensor, topk: int, num_experts: int) -> Tuple[int, ...]:
        return (int(x.shape[1]), _dtype_code(x), topk, num_experts)

    def _high_throughput(
            self, x: Tensor, topk_idx: Optional[Tensor], num_experts: int,
            call: Callable[[_courier.EpBuffer], Any], worst: int = 0,
            waits: bool = True) -> Tuple[_HtSite, Any]:
        """``call`` on the high-throughput Buffer for x's shape: (that
        Buffer's site, what call returned).

        Every rank calls the Buffer of the last dispatch, without talking
        first. A call that Buffer cannot take (another shape, more tokens
        than it holds) is refused by the C++ Buffer on every rank together
        (CallRefused); only then do the ranks all-gather their shapes, switch
        to the Buffer of the agreed shape (made, collectively, when it is new
        or too small) and call again. A refusal for any other reason is
        raised as it came."""
        refused: Optional[CallRefused] = None
        # A call that does not wait goes to agreeing first when its
        # configuration is not the last call's, or its num_worst_tokens is
        # more than that Buffer holds: a refusal would break the Buffer.
        # (worst is the same on every rank, so every rank goes the same way;
        # ranks that disagree on the configuration meet in different places
        # and the timeouts name the rank.)
        current = self._ht_current
        if waits and current is not None:
            try:
                return current, call(current.buffer)
            except CallRefused as error:
                refused = error  # every rank is here: agree on what to do
        topk = int(topk_idx.shape[1]) if topk_idx is not None else 0
        key = self._ht_key_of(x, topk, num_experts)
        if not waits and (current is not None and current.key == key
                          and worst <= self.group_size * current.capacity):
            try:
                return current, call(current.buffer)
            except CallRefused as error:
                refused = error
        # num_worst_tokens rows must fit too: ranks x capacity of them.
        records = self._agree((max(_rows(x), -(-worst // self.group_size)),) + key)
        for r, theirs in enumerate(records):
            if theirs[1:] != key:
                raise Error(
                    f"dispatch: rank {r} calls with hidden {theirs[1]}, dtype code {theirs[2]}, "
                    f"top-{theirs[3]}, {theirs[4]} experts but rank {self.rank} with hidden "
                    f"{key[0]}, dtype code {key[1]}, top-{key[2]}, {key[3]} experts: every rank "
                    "must use the same configuration") from refused
        need = max(max(t[0] for t in records), 1)
        site = self._ht.get(key)
        if refused is not None and current is site and need <= site.capacity:
            raise refused  # the shape fits: the arguments themselves were refused
        if site is None or site.capacity < need:
            if site is not None:  # too small: every rank replaces it now
                site.buffer.close()
            capacity = max(16, 1 << (need - 1).bit_length())
            site = _HtSite(_courier.EpBuffer(
                self.context, num_nvl_bytes=self.num_nvl_bytes, num_rdma_bytes=self.num_rdma_bytes,
                max_tokens_per_rank=capacity, hidden=key[0], element_bytes=_element_bytes(x),
                max_topk=max(topk, 1), num_experts=num_experts), capacity, key, self.rank)
            self._ht[key] = site
        self._ht_current = site
        return site, call(site.buffer)

    def _cached_buffer(self, x: Tensor, handle: "DispatchHandle",
                       buffer: _courier.EpBuffer) -> _courier.EpBuffer:
        """The Buffer a cached dispatch of x runs on: the handle's, or, for x
        of another dtype (DeepEP's callers reuse an FP8 dispatch's handle
        for bfloat16 x), the one that served that dtype before (Courier
        keeps a Buffer per configuration; the handle's layout is host data
        any of them can use)."""
        key = self._ht_key_of(x, handle.key[2], handle.key[3])
        if key == handle.key:
            return buffer
        other = self._ht.get(key)
        if other is None or other.capacity < handle.capacity:
            raise ValueError(
                f"dispatch: a cached dispatch of dtype code {key[1]} with the handle of a "
                f"dispatch of dtype code {handle.key[1]} needs an uncached dispatch of that "
                "dtype, of as many tokens, on this Buffer first")
        return other.buffer

    def _handle_buffer(self, handle: Any, call: str) -> _courier.EpBuffer:
        if not isinstance(handle, DispatchHandle):
            raise ValueError(f"{call}: handle must be the handle a dispatch of this Buffer "
                             f"returned, got {type(handle).__name__}")
        if handle.buffer.closed:
            raise Error(f"{call}: the handle comes from a dispatch made before the Buffer grew "
                        "for more tokens (or was destroyed); dispatch again first")
        return handle.buffer

    def dispatch(
        self,
        x: Union[Tensor, Tuple[Tensor, Tensor]],
        handle: Optional[DispatchHandle] = None,
        num_tokens_per_rank: Optional[Tensor] = None,
        num_tokens_per_rdma_rank: Optional[Tensor] = None,
        is_token_in_rank: Optional[Tensor] = None,
        num_tokens_per_expert: Optional[Tensor] = None,
        topk_idx: Optional[Tensor] = None,
        topk_weights: Optional[Tensor] = None,
        expert_alignment: int = 1,
        num_worst_tokens: int = 0,
        config: Optional[Config] = None,
        previous_event: Optional[EventOverlap] = None,
        async_finish: bool = False,
        allocate_on_comm_stream: bool = False,
    ) -> Tuple[Union[Tensor, Tuple[Tensor, Tensor]], Optional[Tensor], Optional[Tensor],
               Optional[List[int]], Optional[DispatchHandle], EventOverlap]:
        """Collective high-throughput dispatch: each token goes once to every
        rank holding one of its experts.

        ``x``: ``[num_tokens, hidden]`` bfloat16 or float32, or a tuple
        (FP8 e4m3 ``[num_tokens, hidden]``, float32 scales
        ``[num_tokens, hidden // 128]``). Without ``handle``: topk_idx,
        topk_weights, is_token_in_rank and num_tokens_per_expert (from
        get_dispatch_layout) are required. With ``handle`` (cached mode):
        the layout of that earlier dispatch of the same tokens is reused.

        Returns (recv_x (a tuple with FP8 x), recv_topk_idx,
        recv_topk_weights, num_recv_tokens_per_expert_list, handle, event);
        the cached mode returns (recv_x, None, None, None, None, event).
        """
        if self._destroyed:
            self._alive("dispatch")
        if config is not None and not isinstance(config, Config):
            raise ValueError(f"dispatch: config must be a Config, got {type(config).__name__}")
        if not isinstance(expert_alignment, int) or expert_alignment <= 0:
            raise ValueError(f"dispatch: expert_alignment must be positive, got "
                             f"{expert_alignment!r}")
        if not isinstance(num_worst_tokens, int) or num_worst_tokens < 0:
            raise ValueError(f"dispatch: num_worst_tokens must be >= 0, got {num_worst_tokens!r}")
        x, x_scales = x if isinstance(x, tuple) else (x, None)
        kind = self._kind_of(x, "dispatch: x")
        # DeepEP's scale formats: float32 in any layout (column-major
        # included), or UE8M0 int32 [tokens, ceil(hidden / 512)]; Courier's
        # kernels take row-major float32 [tokens, hidden / 128], and the
        # received scales go back in the caller's format.
        ue8m0 = x_scales is not None and str(x_scales.dtype).endswith("int32")
        if ue8m0:
            x_scales = _unpack_ue8m0(kind, x_scales, int(x.shape[1]) // _FP8_BLOCK)
        elif x_scales is not None:
            x_scales = (x_scales.contiguous() if kind.torch is not None else
                        np.ascontiguousarray(x_scales))

        if handle is not None:
            if topk_idx is not None or topk_weights is not None:
                raise ValueError("dispatch: with a handle (cached mode) topk_idx and topk_weights "
                                 "must be None")
            buffer = self._handle_buffer(handle, "dispatch")
            buffer = self._cached_buffer(x, handle, buffer)
            follow = kind.order_after_producer(buffer, previous_event, native_follows=True)
            # The kernels pad to num_worst_tokens rows where the handle's
            # Buffer holds that many; beyond, the copies are padded here.
            fits = num_worst_tokens <= self.group_size * handle.capacity
            out = buffer.dispatch(_to_courier(x, "x"), _to_courier(x_scales, "x_scales"),
                                  cached_handle=handle.native,
                                  num_worst_tokens=num_worst_tokens if fits else 0,
                                  owned=kind.owns,
                                  follow_stream=follow)
            pad = 0 if fits else num_worst_tokens
            recv_x = kind.padded(kind.owned(out.recv_x), pad, 0, "dispatch")
            recv_scales = kind.padded(kind.owned(out.recv_x_scales), pad, 0, "dispatch")
            if ue8m0 and recv_scales is not None:
                recv_scales = _pack_ue8m0(kind, recv_scales)
            del out
            return ((recv_x, recv_scales) if x_scales is not None else recv_x, None, None, None,
                    None, kind.event(async_finish))
        if (topk_idx is None) != (topk_weights is None):
            raise ValueError("dispatch: topk_idx and topk_weights go together (both or neither)")
        if is_token_in_rank is None:
            raise ValueError("dispatch: is_token_in_rank is required without a handle (from "
                             "get_dispatch_layout)")
        with_topk = topk_idx is not None
        if with_topk and num_tokens_per_expert is None:
            raise ValueError("dispatch: num_tokens_per_expert is required with topk_idx (from "
                             "get_dispatch_layout)")
        num_experts = self._num_experts_of(num_tokens_per_expert)
        def run(native: _courier.EpBuffer) -> Any:
            follow = (True if kind.follows and previous_event is None else
                      kind.order_after_producer(native, previous_event, native_follows=True))
            # With num_worst_tokens the kernels pad the receive tensors; on a
            # CUDA stream over the proxy path the call then reads nothing on
            # the host (its counts stay on the device), so it can be captured.
            # (The arguments are made per call: a DLPack capsule is used once.)
            # Torch tensors through the C exchange API cross as themselves,
            # and the results come as tensors the caller owns, copied on the
            # stream where the plugin can (kind.results).
            same = kind.exchange_type
            return native.dispatch(
                _crossing(x, "x", same), _crossing(x_scales, "x_scales", same),
                _crossing(topk_idx, "topk_idx", same),
                _crossing(topk_weights, "topk_weights", same),
                _crossing(is_token_in_rank, "is_token_in_rank", same), num_experts, None,
                num_worst_tokens, kind.owns, follow)

        # On a CUDA stream over the proxy path, num_worst_tokens makes the call
        # return before its kernels ran.
        waits = not (num_worst_tokens > 0 and self.transport == "proxy"
                     and kind.streams)
        site, out = self._high_throughput(x, topk_idx, num_experts, run, worst=num_worst_tokens,
                                          waits=waits)
        worst = num_worst_tokens
        # A weight whose expert lives on another rank reads 0 (the kernels
        # write it so, as DeepEP's); without top-k both are None.
        (recv_x, recv_scales, recv_idx, recv_weights, received_per_expert,
         native_handle) = kind.results(out, with_topk)
        del out
        if ue8m0 and recv_scales is not None:
            recv_scales = _pack_ue8m0(kind, recv_scales)
        if not with_topk and worst == 0:
            received_per_expert = self._received_per_expert(kind, num_tokens_per_expert)
        # With num_worst_tokens the list is empty, as DeepEP's: shapes and
        # results then never depend on counts read on the host.
        a = expert_alignment
        counts = ([] if worst > 0 else received_per_expert if a == 1 else
                  [(int(c) + a - 1) // a * a for c in received_per_expert])
        new_handle = DispatchHandle(native_handle, site, is_token_in_rank, worst, kind)
        return ((recv_x, recv_scales) if x_scales is not None else recv_x, recv_idx,
                recv_weights, counts, new_handle,
                kind.event(True) if async_finish else EventOverlap())

    def _num_experts_of(self, num_tokens_per_expert: Optional[Tensor]) -> int:
        """The call's experts: len(num_tokens_per_expert). Without it (only
        without top-k) the experts only name per-expert counts; one per rank
        keeps the C++ Buffer's configuration valid."""
        if num_tokens_per_expert is None:
            return self.group_size
        return int(num_tokens_per_expert.shape[0])

    def _received_per_expert(self, kind: _Kind,
                             num_tokens_per_expert: Optional[Tensor]) -> List[int]:
        """A dispatch without topk_idx: no expert ids travel, so, as DeepEP
        does, this rank's per-expert counts are the senders'
        num_tokens_per_expert for its experts, summed (one out-of-band
        all-gather through the bootstrap). Without num_tokens_per_expert
        there are no experts to count: []."""
        # Every rank passed the same number of experts (_high_throughput
        # agreed on it), so the blocks, a flag then the counts, have one length.
        given = num_tokens_per_expert is not None
        mine = np.zeros(1 + self._num_experts_of(num_tokens_per_expert), np.int64)
        if given:
            host = (num_tokens_per_expert.detach().cpu().numpy() if kind.torch is not None
                    else np.asarray(num_tokens_per_expert))
            mine[0] = 1
            mine[1:] = host.reshape(-1)
        everyone = np.frombuffer(self.context.allgather(mine.tobytes()), np.int64)
        everyone = everyone.reshape(self.group_size, -1)
        if not everyone[:, 0].all():
            if everyone[:, 0].any():
                raise ValueError("dispatch: num_tokens_per_expert is given on some ranks and not "
                                 "on others")
            return []
        per = (everyone.shape[1] - 1) // self.group_size
        local = everyone[:, 1 + self.rank * per:1 + (self.rank + 1) * per]
        return [int(c) for c in local.sum(axis=0)]

    def combine(
        self,
        x: Tensor,
        handle: DispatchHandle,
        topk_weights: Optional[Tensor] = None,
        bias: Union[Tensor, Tuple[Tensor, Tensor], None] = None,
        config: Optional[Config] = None,
        previous_event: Optional[EventOverlap] = None,
        async_finish: bool = False,
        allocate_on_comm_stream: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor], EventOverlap]:
        """Collective high-throughput combine: ``x`` ``[received, hidden]`` in
        recv_x's order goes back; each token gets the sum of its rows
        (weight them before, as with DeepEP). ``bias`` (one tensor or two)
        ``[num_tokens, hidden]`` is added to the result.

        Returns (combined_x, combined_topk_weights, event). With
        ``topk_weights`` ``[received, num_topk]`` float32, combined_topk_weights
        holds, per token, the sum of the weight rows its ranks sent back; they
        travel out of band through the bootstrap (correct, not fast)."""
        if self._destroyed:
            self._alive("combine")
        if config is not None and not isinstance(config, Config):
            raise ValueError(f"combine: config must be a Config, got {type(config).__name__}")
        buffer = self._handle_buffer(handle, "combine")
        kind = self._kind_of(x, "combine: x")
        follow = kind.order_after_producer(buffer, previous_event, native_follows=True)
        combined = kind.owned(buffer.combine(_to_courier(x, "x"), handle.native,
                                             owned=kind.owns,
                                             follow_stream=follow))
        for b in (bias if isinstance(bias, tuple) else (bias,)):
            if b is not None:
                if tuple(b.shape) != tuple(combined.shape):
                    raise ValueError(f"combine: bias has shape {tuple(b.shape)} where "
                                     f"{tuple(combined.shape)} is required")
                combined += b
        combined_weights = None
        if topk_weights is not None:
            combined_weights = self._combine_weights(kind, topk_weights, handle)
        return combined, combined_weights, kind.event(async_finish)

    def _combine_weights(self, kind: _Kind, topk_weights: Tensor,
                         handle: DispatchHandle) -> Tensor:
        """combine's topk_weights, reduced through the bootstrap: every rank
        publishes the weight rows it received (and from whom); each sums,
        per token, the rows of the ranks the token went to."""
        ranks, me = self.group_size, self.rank
        if handle.native.counts_on_device:
            raise Error("combine: topk_weights with the handle of a dispatch that did not wait "
                        "(num_worst_tokens on a CUDA stream) is not offered yet: the weights are "
                        "reduced through the host, which needs the received counts")
        host = lambda t: t.detach().cpu().numpy() if kind.torch is not None else np.asarray(t)
        weights = host(topk_weights)
        counts = list(handle.native.recv_counts)
        received = sum(counts)
        if (weights.dtype != np.float32 or weights.ndim != 2
                or weights.shape[0] < received):
            raise ValueError(f"combine: topk_weights must be [{received}, num_topk] float32, got "
                             f"{weights.dtype} {tuple(weights.shape)}")
        topk = weights.shape[1]
        slots = ranks * handle.capacity
        block = np.zeros(ranks * 2 + slots * topk, np.float32)
        block[:ranks] = np.array(counts, np.float32)
        block[ranks:ranks + 1] = topk
        block[ranks * 2:ranks * 2 + received * topk] = weights[:received].reshape(-1)
        everyone = np.frombuffer(self.context.allgather(block.tobytes()), np.float32)
        everyone = everyone.reshape(ranks, -1)
        in_rank = host(handle.is_token_in_rank).astype(bool)
        out = np.zeros((in_rank.shape[0], topk), np.float32)
        for r in range(ranks):
            theirs = everyone[r]
            if int(theirs[ranks]) != topk:
                raise Error(f"combine: rank {r} passes topk_weights with {int(theirs[ranks])} "
                            f"columns, rank {me} with {topk}")
            begin = int(theirs[:me].sum())
            tokens = np.nonzero(in_rank[:, r])[0]
            rows = theirs[ranks * 2:].reshape(-1, topk)[begin:begin + len(tokens)]
            out[tokens] += rows
        if kind.torch is not None:
            return kind.torch.from_numpy(out).to(kind.device)
        return out

    # -- low-latency ------------------------------------------------------------------

    def _low_latency(self, x: Tensor, max_tokens: int, num_experts: int, topk: int,
                     use_fp8: bool) -> _courier.EpBuffer:
        if not self.low_latency_mode:
            raise ValueError("low_latency_dispatch: the Buffer was made without "
                             "low_latency_mode=True")
        hidden = int(x.shape[1])
        element_bytes = _element_bytes(x)
        key = (max_tokens, hidden, num_experts, element_bytes, topk, int(use_fp8))
        buffer = self._ll.get(key)
        if buffer is None:
            # The size is checked once per key (num_rdma_bytes is fixed).
            need = _low_latency_bytes(max_tokens, hidden, self.group_size, num_experts,
                                      element_bytes)
            if self.num_rdma_bytes < need:
                raise ValueError(
                    f"low_latency_dispatch: num_rdma_bytes {self.num_rdma_bytes} is below the "
                    f"{need} bytes {max_tokens} tokens of hidden {hidden} over {num_experts} "
                    "experts need (Buffer.get_low_latency_rdma_size_hint)")
            # Another size replaces the earlier ones (FP8 and not may coexist).
            self._ll_plans.clear()  # they name the Buffers replaced here
            for old_key in [k for k in self._ll if k[:5] != key[:5]]:
                old = self._ll.pop(old_key)
                self._forget_outputs(old)
                old.close()
            buffer = _courier.EpBuffer(
                self.context, num_nvl_bytes=self.num_nvl_bytes, num_rdma_bytes=self.num_rdma_bytes,
                low_latency_mode=True, max_tokens_per_rank=max_tokens, hidden=hidden,
                element_bytes=element_bytes, max_topk=max(topk, 1), num_experts=num_experts)
            self._ll[key] = buffer
        return buffer

    def clean_low_latency_buffer(self, num_max_dispatch_tokens_per_rank: int, hidden: int,
                                 num_experts: int) -> None:
        """DeepEP zeroes its low-latency signals here. Courier's low-latency
        calls count epochs instead and need no cleaning: the arguments are
        checked and nothing else happens."""
        self._alive("clean_low_latency_buffer")
        Buffer.get_low_latency_rdma_size_hint(num_max_dispatch_tokens_per_rank, hidden,
                                              self.group_size, num_experts)

    def low_latency_dispatch(
        self,
        x: Tensor,
        topk_idx: Tensor,
        num_max_dispatch_tokens_per_rank: int,
        num_experts: int,
        cumulative_local_expert_recv_stats: Optional[Tensor] = None,
        dispatch_wait_recv_cost_stats: Optional[Tensor] = None,
        use_fp8: bool = True,
        round_scale: bool = False,
        use_ue8m0: bool = False,
        async_finish: bool = False,
        return_recv_hook: bool = False,
    ) -> Tuple[Union[Tensor, Tuple[Tensor, Tensor]], Tensor, LowLatencyHandle, EventOverlap,
               Optional[Callable[[], None]]]:
        """Collective low-latency dispatch: every (token, expert) pair travels
        into per-expert receive rows.

        ``x``: ``[num_tokens, hidden]`` bfloat16 (or float32);
        ``topk_idx``: ``[num_tokens, num_topk]`` int64, -1 for none.
        ``use_fp8``: send FP8 e4m3 with one float32 scale per 128 channels;
        ``round_scale``: each scale rounded up to a power of two, as DeepEP's
        (ignored without use_fp8, as there); ``use_ue8m0`` (with both): the
        scales as DeepEP's UE8M0, exponent bytes packed four per int32,
        ``[..., ceil(hidden / 512)]``.
        ``return_recv_hook``: return after sending; the hook receives.

        Returns (recv_x ``[num_local_experts, num_ranks *
        num_max_dispatch_tokens_per_rank, hidden]`` (with use_fp8 a tuple with
        the scales ``[..., hidden // 128]``, column-major in the last two
        dimensions as DeepEP's), recv_count ``[num_local_experts]`` int32,
        handle, event, hook (None without return_recv_hook))."""
        if self._destroyed:
            self._alive("low_latency_dispatch")
        # The receive buffers alternate between two slots: this dispatch
        # reuses the one of the dispatch before the last, whose hook must have
        # run (every rank runs the same calls, so every rank refuses alike).
        # Checked first: nothing may change (a Buffer replaced) before.
        number = self._ll_dispatches + 1
        waiting = self._ll_waiting_hooks
        if waiting and waiting.get(number - 2):
            raise Error(
                f"low_latency_dispatch: the receive hook of low-latency dispatch {number - 2} has "
                "not run, and this dispatch would reuse its receive buffer: call each hook "
                "before the next-but-one dispatch (at most two may await their hooks)")
        # What the call's shapes and flags decide (its native Buffer, how its
        # arguments cross) is worked out once per combination (_ll_plan).
        try:
            key = (type(x), getattr(x, "device", None), x.dtype, x.shape[1], topk_idx.shape[1],
                   num_max_dispatch_tokens_per_rank, num_experts, use_fp8, round_scale, use_ue8m0)
            plan = self._ll_plans.get(key)
        except (AttributeError, IndexError, TypeError):  # not a tensor: _ll_plan says what
            key = plan = None
        if plan is None:
            plan = self._ll_plan(key, x, topk_idx, num_max_dispatch_tokens_per_rank, num_experts,
                                 use_fp8, round_scale, use_ue8m0)
        kind, buffer = plan.kind, plan.buffer
        # async_finish (without a hook, as DeepEP's): on the comm stream, so
        # the caller's stream goes on meanwhile.
        comm = (self._comm_stream_of(kind) if async_finish and not return_recv_hook and
                kind.streams else None)
        if comm is None and kind.follows and not self._comm_pending:
            follow = True  # the usual call: the native call follows the current stream
        else:  # otherwise behind what earlier calls left on the comm stream
            follow = kind.order_after_producer(buffer, comm=comm,
                                               after=self._comm_to_follow(kind, comm),
                                               native_follows=True)
        # The wait costs are measured on the proxy path; the direct path
        # leaves them unchanged (docs/python.md).
        cost = dispatch_wait_recv_cost_stats if plan.proxy else None
        stats = cumulative_local_expert_recv_stats
        # The kernels write into the outputs (allocated once per shape and
        # parity, see _ll_outputs), nothing is read on the host, so the call
        # can be captured in a CUDA graph. The parity is that of this native
        # Buffer's own calls, as its receive buffers alternate.
        calls = self._ll_calls.get(buffer, 0)
        outs, slot = self._ll_out.get(plan.outputs[calls % 2]) or self._ll_outputs(
            plan, x, calls % 2)
        recv_x, recv_scales, recv_count, src_info, layout_range = outs
        # Through the C exchange API the tensors cross as themselves.
        same = kind.exchange_type
        native = buffer.low_latency_dispatch(
            _crossing(x, "x", same), _crossing(topk_idx, "topk_idx", same),
            use_fp8=plan.use_fp8, return_recv_hook=bool(return_recv_hook),
            round_scale=plan.round_scale,
            wait_cost_stats=None if cost is None else _to_courier(
                cost, "dispatch_wait_recv_cost_stats"),
            scales_layout=plan.scales_layout, outputs=slot, follow_stream=follow)
        self._ll_dispatches = number
        self._ll_calls[buffer] = calls + 1
        # The combine's kernels read recv_count too: the handle keeps it.
        handle = LowLatencyHandle(plan.handle_items(src_info, layout_range), native.handle,
                                  buffer, recv_count)
        hook: Optional[Callable[[], None]] = None
        if return_recv_hook:
            hook = self._receive_hook(kind, buffer, native, number, waiting, stats, recv_count)
        elif stats is not None:
            self._count_received(kind, comm, stats, recv_count)
        if comm is None:
            event = kind.event(async_finish) if async_finish else EventOverlap()
        else:
            event = kind.finish_on(comm, async_finish, (x, topk_idx, cost, stats, recv_x,
                                                        recv_scales, recv_count, src_info,
                                                        layout_range))
        return ((recv_x, recv_scales) if plan.use_fp8 else recv_x, recv_count, handle, event,
                hook)

    def _ll_plan(self, key: Optional[Tuple[Any, ...]], x: Tensor, topk_idx: Tensor,
                 max_tokens: Any, num_experts: Any, use_fp8: Any, round_scale: Any,
                 use_ue8m0: Any) -> "_LowLatencyPlan":
        """The _LowLatencyPlan of a low-latency dispatch, kept under `key`
        (None: not kept) where the counts and flags are plain ints and bools."""
        if use_ue8m0 and not (use_fp8 and round_scale):
            raise ValueError("low_latency_dispatch: use_ue8m0 needs use_fp8=True and "
                             "round_scale=True (UE8M0 holds powers of two only), as DeepEP's")
        kind = self._kind_of(x, "low_latency_dispatch: x")
        # (Shapes are the C++ Buffer's to check: it refuses on every rank alike.)
        plain = all(type(v) in (int, bool) for v in (max_tokens, num_experts, use_fp8,
                                                     round_scale, use_ue8m0))
        max_tokens, num_experts = int(max_tokens), int(num_experts)
        buffer = self._low_latency(x, max_tokens, num_experts, int(topk_idx.shape[1]),
                                   bool(use_fp8))
        plan = _LowLatencyPlan(kind, buffer, buffer.transport == "proxy", bool(use_fp8),
                               bool(use_fp8) and bool(round_scale), bool(use_ue8m0), max_tokens,
                               int(x.shape[1]), num_experts, x)
        if key is not None and plain:  # (a tensor as a count would hash by identity)
            self._ll_plans[key] = plan
        return plan

    def _receive_hook(self, kind: _Kind, buffer: _courier.EpBuffer, native: Any, number: int,
                      waiting: Dict[int, Any], stats: Optional[Tensor],
                      recv_count: Tensor) -> Callable[[], None]:
        """return_recv_hook's hook for dispatch `number`: runs the receive
        kernels once, on the stream current when it is called, behind the
        dispatch's (on the stream current at the dispatch)."""
        pending = [native]
        waiting[number] = pending
        launch = (kind.torch.cuda.current_stream(kind.device)
                  if kind.torch is not None and kind.device.type == "cuda" else None)

        def receive() -> None:
            if not pending:
                raise Error("low_latency_dispatch: the receive hook was already called")
            received = pending.pop()
            waiting.pop(number, None)
            if received.has_recv_hook:
                kind.order_after_producer(buffer, after=launch)
                received.recv_hook()
            if stats is not None:
                self._count_received(kind, None, stats, recv_count)

        return receive

    @staticmethod
    def _count_received(kind: _Kind, comm: Any, stats: Tensor, recv_count: Tensor) -> None:
        """cumulative_local_expert_recv_stats += recv_count, behind the
        receive kernels (on `comm` when they ran there)."""
        if comm is not None:
            with kind.torch.cuda.stream(comm):
                stats.add_(recv_count)
        elif kind.torch is not None:
            stats.add_(recv_count)
        else:
            np.add(stats, recv_count, out=stats)

    def _ll_outputs(self, plan: "_LowLatencyPlan", x: Tensor,
                    parity: int) -> Tuple[Tuple[Any, ...], int]:
        """The low-latency dispatch outputs: (recv_x,
        recv_scales as DeepEP lays them out (column-major; None without
        FP8), recv_count, src_info, layout_range) and the native Buffer's
        outputs slot they are bound to. Made once per native Buffer (its
        shape), UE8M0 or not, and parity of its calls, as its receive
        buffers are: a dispatch's outputs are reused by that Buffer's
        dispatch after next (docs/python.md). Kept under
        plan.outputs[parity], which names x's dtype too: a call refused
        for its dtype leaves no outputs of that dtype for the next one."""
        kind, buffer, use_fp8, use_ue8m0 = plan.kind, plan.buffer, plan.use_fp8, plan.use_ue8m0
        max_tokens, num_experts = plan.max_tokens, plan.num_experts
        key = plan.outputs[parity]
        cache = self._ll_out
        made = cache.get(key)
        if made is None:
            ranks = self.group_size
            hidden = int(x.shape[1])
            dtype = "float8_e4m3fn" if use_fp8 else _dtype_name(x)
            L, N = num_experts // ranks, ranks * max_tokens
            recv_x, x_arg = kind.output((L, N, hidden), dtype)
            recv_scales = scales_arg = None
            if use_fp8:
                columns = hidden // _FP8_BLOCK
                if use_ue8m0:  # four exponent bytes per int32
                    storage, scales_arg = kind.output((L, -(-columns // 4), N), "int32")
                else:
                    storage, scales_arg = kind.output((L, columns, N), "float32")
                recv_scales = kind.transposed(storage)
            recv_count, count_arg = kind.output((L,), "int32")
            src_info, src_arg = kind.output((L, N), "int32")
            layout_range, range_arg = kind.output((L, ranks), "int64")
            # Imported by the native Buffer once, not at every call; a set
            # bound to the slot before is dropped.
            slot = 2 * int(use_ue8m0) + parity
            for old in [k for k, v in cache.items() if k[0] is buffer and v[1] == slot]:
                del cache[old]
            buffer.bind_low_latency_outputs(
                slot, _to_courier(x_arg, "out_x"), _to_courier(scales_arg, "out_x_scales"),
                _to_courier(count_arg, "out_count"), _to_courier(src_arg, "out_src_info"),
                _to_courier(range_arg, "out_layout_range"))
            made = ((recv_x, recv_scales, recv_count, src_info, layout_range), slot)
            cache[key] = made
        return made

    def _forget_outputs(self, buffer: _courier.EpBuffer) -> None:
        """Drops what _ll_outputs and the call counts hold for `buffer`."""
        for key in [k for k in self._ll_out if k[0] is buffer]:
            del self._ll_out[key]
        self._ll_calls.pop(buffer, None)

    def _comm_stream_of(self, kind: _Kind) -> Any:
        """The Buffer's comm stream on kind's device, made on first use."""
        stream = self._comm_streams.get(kind.device)
        if stream is None:
            stream = kind.torch.cuda.Stream(device=kind.device)
            self._comm_streams[kind.device] = stream
        return stream

    def _comm_to_follow(self, kind: _Kind, comm: Any) -> Any:
        """The comm stream, if the current stream must wait for it before
        a low-latency call: when an earlier call left work there that this
        stream has not followed yet. Work queued there under a CUDA graph
        capture is followed only from inside a capture the comm stream is
        still part of, and work queued before a capture not from inside one
        (a graph cannot wait for work outside it; synchronize before
        capturing, as with any stream). Also notes whether this call
        (`comm` set) leaves work there."""
        torch = kind.torch
        if comm is not None:
            # [captured, the raw streams that followed it]
            self._comm_pending[kind.device] = [torch.cuda.is_current_stream_capturing(), set()]
            return None
        pending = self._comm_pending.get(kind.device)
        if pending is None:
            return None
        here = kind.raw_stream()
        captured, followed = pending
        if here in followed:
            return None
        stream = self._comm_streams[kind.device]
        capturing = torch.cuda.is_current_stream_capturing()
        if captured:
            with torch.cuda.stream(stream):
                comm_capturing = torch.cuda.is_current_stream_capturing()
            if not (capturing and comm_capturing):
                return None  # the graph's own work: its replays order it
        elif capturing:
            return None
        followed.add(here)
        return stream

    def get_comm_stream(self) -> Any:
        """The stream low-latency calls with async_finish run on (a
        torch.cuda.Stream on the current device), as DeepEP's."""
        torch = _torch_module()
        if torch is None or not torch.cuda.is_available():
            raise Error("get_comm_stream: there is no CUDA device (gpu-host runs no streams)")
        device = torch.device("cuda", torch.cuda.current_device())
        stream = self._comm_streams.get(device)
        if stream is None:
            stream = torch.cuda.Stream(device=device)
            self._comm_streams[device] = stream
        return stream

    def get_next_low_latency_combine_buffer(self, handle: LowLatencyHandle) -> Tensor:
        """A bfloat16 tensor ``[num_local_experts, num_ranks *
        num_max_dispatch_tokens_per_rank, hidden]`` to write expert outputs
        into; low_latency_combine(..., zero_copy=True) with this handle then
        sends it (instead of its x). In Courier it is an ordinary tensor of
        the caller's, not a window of the Buffer."""
        if not isinstance(handle, LowLatencyHandle):
            raise ValueError("get_next_low_latency_combine_buffer: handle must be the one "
                             f"low_latency_dispatch returned, got {type(handle).__name__}")
        if handle.combine_buffer is None:
            src_info, _, max_tokens, hidden, num_experts = handle
            kind = _Kind(src_info, "handle")
            handle.combine_buffer = kind.empty(
                (num_experts // self.group_size, self.group_size * max_tokens, hidden), "bfloat16")
        return handle.combine_buffer

    def low_latency_combine(
        self,
        x: Tensor,
        topk_idx: Tensor,
        topk_weights: Tensor,
        handle: LowLatencyHandle,
        use_logfmt: bool = False,
        zero_copy: bool = False,
        async_finish: bool = False,
        return_recv_hook: bool = False,
        out: Optional[Tensor] = None,
        combine_wait_recv_cost_stats: Optional[Tensor] = None,
    ) -> Tuple[Tensor, EventOverlap, Optional[Callable[[], None]]]:
        """Collective low-latency combine: ``x`` ``[num_local_experts,
        num_ranks * num_max_dispatch_tokens_per_rank, hidden]`` bfloat16 in
        recv_x's layout goes back; each token gets sum over k of
        topk_weights[t, k] * (its row from expert k).

        ``use_logfmt``: the rows travel in LogFMT, as DeepEP's: per block of
        128 channels whose magnitudes are all below 1, 10 bits per value (a
        sign and a 9-bit code on a log scale between the block's smallest and
        largest magnitude), other blocks bfloat16; the result approximates
        the bfloat16 combine (docs/ep.md, "LogFMT combine"). Needs a GPU
        backend with the ep_logfmt capability. Unlike DeepEP's, it may be
        combined with zero_copy.

        Returns (combined_x ``[num_tokens, hidden]`` (``out`` when given),
        event, hook). With return_recv_hook the combine is complete already
        and the hook does nothing (the results are the same)."""
        if self._destroyed:
            self._alive("low_latency_combine")
        if not isinstance(handle, LowLatencyHandle):
            raise ValueError("low_latency_combine: handle must be the one low_latency_dispatch "
                             f"returned, got {type(handle).__name__}")
        if handle.buffer.closed:
            raise Error("low_latency_combine: the handle comes from a low-latency dispatch of "
                        "another size (or the Buffer was destroyed); dispatch again first")
        if zero_copy and handle.combine_buffer is not None:
            x = handle.combine_buffer  # where the caller wrote the rows
        kind = self._kind_of(x, "low_latency_combine: x")
        comm = (self._comm_stream_of(kind) if async_finish and not return_recv_hook and
                kind.streams else None)
        if comm is None and kind.follows and not self._comm_pending:
            follow = True  # the usual call: the native call follows the current stream
        else:
            follow = kind.order_after_producer(handle.buffer, comm=comm,
                                               after=self._comm_to_follow(kind, comm),
                                               native_follows=True)
        # Summed straight into the result (DeepEP's combined_x is a new
        # tensor per call too): nothing copied, nothing read on the host.
        # Through the C exchange API the native call allocates it (owned).
        owned = out is None and kind.exchanges
        if owned:
            out_arg = None
        elif out is None and kind.torch is not None:
            out = out_arg = kind.torch.empty((topk_idx.shape[0], x.shape[-1]), dtype=x.dtype,
                                             device=kind.device)
        elif out is None:
            out, out_arg = kind.output((int(topk_idx.shape[0]), int(x.shape[-1])), _dtype_name(x))
        else:
            out_arg = out
        # The wait costs are measured on the proxy path only (docs/python.md).
        cost = (combine_wait_recv_cost_stats if combine_wait_recv_cost_stats is not None
                and handle.buffer.transport == "proxy" else None)
        same = kind.exchange_type
        combined = handle.buffer.low_latency_combine(
            _crossing(x, "x", same), _crossing(topk_idx, "topk_idx", same),
            _crossing(topk_weights, "topk_weights", same), handle.native,
            use_logfmt=bool(use_logfmt),
            wait_cost_stats=None if cost is None else _to_courier(
                cost, "combine_wait_recv_cost_stats"),
            out=_to_courier(out_arg, "out"), follow_stream=follow, owned=owned)
        if owned:
            out = combined
        event = (kind.event(async_finish) if comm is None else
                 kind.finish_on(comm, async_finish, (x, topk_idx, topk_weights, cost, out)))
        return out, event, ((lambda: None) if return_recv_hook else None)
