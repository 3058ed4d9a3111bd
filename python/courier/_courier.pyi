# Type stubs of the nanobind module (python -m nanobind.stubgen -m courier._courier).
"""
Courier's C++ library: Context, the expert-parallel Buffer, DLPack tensors.
"""

from collections.abc import Mapping


class Error(RuntimeError):
    """A failure reported by Courier; the message names what is wrong."""


class CallRefused(Error):
    """A collective call every rank refused together before any data moved (some
    rank's arguments were wrong, or the ranks' configurations differ); the object
    stays usable."""


class DtypeView:
    """The bits of a tensor read as another dtype of the same width."""

    def __init__(self, tensor: object, dtype: str) -> None:
        """
        View `tensor` (anything with __dlpack__) as `dtype`, e.g. uint16 bits as 'bfloat16'.
        """

    @property
    def dtype(self) -> str:
        """The dtype read."""

class TensorRef:
    """
    A view into memory a Buffer owns, for numpy.from_dlpack or torch.from_dlpack. Valid until the Buffer's next call that produces the same output.
    """

    def __dlpack__(self, *, stream: object | None = None, max_version: object | None = None, dl_device: object | None = None, copy: object | None = None) -> object:
        """A DLPack capsule of this view (it keeps the view alive)."""

    def __dlpack_device__(self) -> tuple[int, int]:
        """(device type, device id) as DLPack numbers them."""

    @property
    def shape(self) -> tuple:
        """The view's shape."""

    @property
    def dtype(self) -> str:
        """
        The view's dtype name ('bfloat16', 'float32', 'float8_e4m3fn', 'int64', ...).
        """

    def reinterpret(self, dtype: str) -> TensorRef:
        """
        The same memory as another dtype of the same width (e.g. 'uint16' for bfloat16).
        """

class CallbackBootstrap:
    """
    An already joined job whose collectives are Python callables (courier.deep_ep builds one from a torch.distributed group).
    """

    def __init__(self, rank: int, size: int, allgather: object, barrier: object) -> None:
        """
        allgather(bytes) -> bytes returns every rank's block in rank order; barrier() waits for all ranks.
        """

    @property
    def rank(self) -> int:
        """This rank."""

    @property
    def size(self) -> int:
        """The number of ranks."""

class Context:
    """
    One rank's view of a Courier job: configuration, backends, bootstrap, proxies. Creating one is collective.
    """

    def __init__(self, env: Mapping[str, str] | None = None, bootstrap: CallbackBootstrap | None = None) -> None:
        """
        Join the job. `env` overrides COURIER_* variables of the process environment; `bootstrap` is an already joined job (CallbackBootstrap), otherwise the job the environment names (courier-run, torchrun, ...).
        """

    @property
    def rank(self) -> int:
        """This rank."""

    @property
    def world_size(self) -> int:
        """The number of ranks."""

    @property
    def gpu_backend(self) -> str:
        """The GPU backend in use ('host', ...)."""

    @property
    def nic_backend(self) -> str:
        """The NIC backend in use ('ofi', ...)."""

    @property
    def bootstrap_kind(self) -> str:
        """How the ranks exchange data out of band: 'tcp', 'mpi' or 'python'."""

    @property
    def rank_hosts(self) -> list[int]:
        """Per rank, the index of its host (hosts in the order of their lowest rank)."""

    def barrier(self) -> None:
        """Collective: returns once every rank got here."""

    def allgather(self, mine: bytes) -> bytes:
        """
        Collective, out of band: every rank's `mine` (all of one length), concatenated in rank order.
        """

class DispatchHandle:
    """What combine needs to bring a high-throughput dispatch back."""

    @property
    def num_tokens(self) -> int:
        """This rank's dispatched tokens."""

    @property
    def recv_counts(self) -> list[int]:
        """Rows received from each rank."""

    @property
    def hidden(self) -> int:
        """The hidden size of the rows."""

    @property
    def num_worst_tokens(self) -> int:
        """Rows of the padded receive tensors (0: not padded)."""

    @property
    def counts_on_device(self) -> bool:
        """
        The dispatch did not wait: its counts stay on the device (recv_counts is empty).
        """

class LowLatencyHandle:
    """What low_latency_combine needs to bring a dispatch back."""

    @property
    def num_tokens(self) -> int:
        """This rank's dispatched tokens."""

    @property
    def topk(self) -> int:
        """Experts per token."""

    @property
    def call(self) -> int:
        """Which low-latency dispatch (0, 1, ...)."""

    @property
    def hidden(self) -> int:
        """The hidden size of the rows."""

class DispatchOutput:
    """The results of EpBuffer.dispatch (views; with owned, tensors of x's framework, the top-k ones None without topk_idx)."""

    @property
    def recv_x(self) -> object:
        """[received, hidden] rows, by source rank."""

    @property
    def recv_x_scales(self) -> object:
        """FP8 dispatch: [received, hidden / 128] float32 scales; else None."""

    @property
    def recv_topk_idx(self) -> object:
        """
        [received, topk] int64 local expert ids, -1 where the expert is elsewhere.
        """

    @property
    def recv_topk_weights(self) -> object:
        """[received, topk] float32 weights."""

    @property
    def num_recv_tokens_per_expert(self) -> list[int]:
        """Rows received per local expert."""

    @property
    def handle(self) -> DispatchHandle:
        """For combine and cached dispatches."""

    def as_tuple(self) -> tuple[object, object, object, object, list[int], DispatchHandle]:
        """
        (recv_x, recv_x_scales, recv_topk_idx, recv_topk_weights, num_recv_tokens_per_expert, handle) in one call (a hot path's: each attribute read crosses into C++ once).
        """

class LowLatencyOutput:
    """The results of EpBuffer.low_latency_dispatch (views)."""

    @property
    def packed_recv_x(self) -> object:
        """[local experts, ranks * max_tokens, hidden] rows per expert."""

    @property
    def packed_recv_x_scales(self) -> object:
        """
        use_fp8: [local experts, ranks * max_tokens, hidden / 128] float32; else None.
        """

    @property
    def packed_recv_count(self) -> object:
        """[local experts] int32 rows per expert."""

    @property
    def packed_recv_src_info(self) -> object:
        """[local experts, ranks * max_tokens] int32 source token of each row."""

    @property
    def packed_recv_layout_range(self) -> object:
        """[local experts, ranks] int64: (begin << 32) | count per source rank."""

    @property
    def handle(self) -> LowLatencyHandle:
        """For low_latency_combine."""

    @property
    def has_recv_hook(self) -> bool:
        """Whether recv_hook() still has to be called before reading the outputs."""

    def recv_hook(self) -> None:
        """Wait for the rows (return_recv_hook) and fill the outputs. Call once."""

class EpBuffer:
    """
    courier::ep::Buffer: expert-parallel dispatch and combine. Creating and closing it are collective.
    """

    def __init__(self, context: object, *, num_nvl_bytes: int = 0, num_rdma_bytes: int = 0, low_latency_mode: bool = False, max_tokens_per_rank: int = 0, hidden: int = 0, element_bytes: int = 2, max_topk: int = 8, num_experts: int = 0) -> None:
        """
        Collective. Sized for max_tokens_per_rank tokens of `hidden` elements of element_bytes (2: bfloat16, 4: float32) with up to max_topk experts each; low_latency_mode also needs num_experts. Zero tokens: layouts only.
        """

    def close(self) -> None:
        """
        Collective: give the Buffer's memory back now (refused while result views live).
        """

    @property
    def closed(self) -> bool:
        """Whether close() was called."""

    @property
    def num_ranks(self) -> int:
        """The number of ranks."""

    @property
    def rank(self) -> int:
        """This rank."""

    @property
    def transport(self) -> str:
        """
        'direct' (GPU stores between GPUs of one host) or 'proxy' (the NIC backend).
        """

    @property
    def device(self) -> tuple[int, int]:
        """
        Where tensors must live, as (DLPack device type, device id): (1, 0) is the CPU.
        """

    def set_stream(self, stream: int) -> None:
        """
        Run the Buffer's kernels on the GPU runtime's stream with this handle (torch.cuda.Stream.cuda_stream; 0 is the default stream) from now on, behind the work queued there. Low-latency calls then return once their kernels are queued; what those find is raised by the next call or synchronize(), and breaks the Buffer.
        """

    def use_own_stream(self) -> None:
        """
        Back to the Buffer's own stream (the default), after waiting for the calls on the caller's; calls wait for their work again.
        """

    def synchronize(self) -> None:
        """Wait until the calls queued so far ran; raise what those that did not wait found."""

    @property
    def can_set_stream(self) -> bool:
        """
        Whether set_stream can succeed (a GPU plugin of GPU ABI 1.9 or later; gpu-host accepts any stream and runs its kernels before each call returns).
        """

    def get_dispatch_layout(self, topk_idx: object, num_experts: int, num_tokens_per_rank: object, num_tokens_per_expert: object, is_token_in_rank: object) -> None:
        """
        Fill the caller's num_tokens_per_rank [ranks] int32, num_tokens_per_expert [experts] int32 and is_token_in_rank [tokens, ranks] bool from topk_idx.
        """

    def dispatch(self, x: object, x_scales: object | None = None, topk_idx: object | None = None, topk_weights: object | None = None, is_token_in_rank: object | None = None, num_experts: int = 0, cached_handle: DispatchHandle | None = None, num_worst_tokens: int = 0, owned: bool = False, follow_stream: bool = False) -> DispatchOutput:
        """
        Collective high-throughput dispatch; the result's tensors are views valid until the dispatch after next, or with owned tensors of x's framework the caller owns (allocated through x's DLPack C exchange API, copied into on the Buffer's stream); follow_stream: as low_latency_dispatch's.
        """

    @property
    def can_copy_result(self) -> bool:
        """
        Whether owned results are copied on the stream (a GPU plugin of GPU ABI 1.11 or later); else the copy waits for the stream on the host and cannot be captured.
        """

    def combine(self, x: object, handle: DispatchHandle, owned: bool = False, follow_stream: bool = False) -> object:
        """
        Collective high-throughput combine: per token, the sum of the rows sent back (owned, follow_stream: as dispatch's).
        """

    def low_latency_dispatch(self, x: object, topk_idx: object, use_fp8: bool = False, return_recv_hook: bool = False, round_scale: bool = False, wait_cost_stats: object | None = None, scales_layout: str = 'row_major', out_x: object | None = None, out_x_scales: object | None = None, out_count: object | None = None, out_src_info: object | None = None, out_layout_range: object | None = None, outputs: int = -1, follow_stream: bool = False) -> LowLatencyOutput:
        """
        Collective low-latency dispatch into per-expert rows (round_scale: power-of-two FP8 scales; wait_cost_stats: [ranks] int64 that gains the nanoseconds waited for each rank, proxy path only; scales_layout: row_major, column_major or ue8m0 (GPU ABI 1.10); out_*: the caller's tensors to receive into, all or none (out_x_scales in its storage layout, ep.hpp LowLatencyOutputs); outputs: the slot of tensors bound with bind_low_latency_outputs instead of out_*; follow_stream: first set_stream to the stream current for x's device, read through x's DLPack C exchange API). With an outputs slot the result's views are None.
        """

    def bind_low_latency_outputs(self, slot: int, out_x: object | None, out_x_scales: object | None, out_count: object | None, out_src_info: object | None, out_layout_range: object | None) -> None:
        """
        Import low-latency dispatch outputs once, for the calls that pass outputs=slot (0..3); the tensors stay referenced until they are rebound or the Buffer closes. Checked at each call, as out_* are.
        """

    def low_latency_combine(self, x: object, topk_idx: object, topk_weights: object, handle: LowLatencyHandle, use_logfmt: bool = False, wait_cost_stats: object | None = None, out: object | None = None, follow_stream: bool = False, owned: bool = False) -> object:
        """
        Collective low-latency combine: per token, sum over k of weight * row (use_logfmt: the rows travel in LogFMT, 10 bits per value where a 128-channel block is below 1; needs the ep_logfmt capability; out: the caller's [tokens, hidden] to sum into; follow_stream: as low_latency_dispatch's; owned without out: the result is a tensor of x's framework, allocated through x's DLPack C exchange API).
        """

def has_dlpack_exchange_api(type: object) -> bool:
    """
    Whether tensors of this type cross through DLPack's C exchange API (a version 1.x table published on the type), as the bridge sees it.
    """
