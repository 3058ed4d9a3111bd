#!/usr/bin/env python3
"""Courier's expert-parallel benchmark through the Python API (`courier.deep_ep`).

Times dispatch and combine as a Python user calls them, in high-throughput (ht) and/or
low-latency (ll) mode, and prints the table of `courier-bench ep` (same columns, same
routing rule, same byte counts, median and p99 over the timed iterations) plus the Python
overhead per call:

  median us / p99 us  wall time of the Python call until its GPU work is done (the call,
                      then torch.cuda.synchronize), every call started between barriers
  GB/s                bytes of the bfloat16 rows (FP8 rows with their scales for ll --fp8)
                      this rank sends to other ranks / median, measured on rank 0
  c++ us              median time spent inside the library's native calls during one call
  py us               median Python overhead per call: per call with the wrappers, its host
                      time (until it returns) minus the time inside its native calls and
                      minus the wrappers' own cost on that call (measured, see below)

The native time is measured by wrapping the callables of `courier`'s extension module
(`courier._*`): the methods and property getters of its classes (a getter converts
C++ results, such as the per-expert count list) and its functions (also where
`courier.deep_ep` imported them). Each is wrapped twice, a timer around a timer: the
inner one gives the native time (plus the few steps of its own between its two clock
reads), and the outer one's excess over it is what one wrapper costs around that call,
in the state the call leaves the caches in (a wrapper costs more there than in a loop of
its own). The outer wrapper costs as much again, less the steps between its clock
reads, which a loop of a cheap native call measures once at start. So a call's Python
time is host - inner - 2 (outer - inner) + calls x (steps between a wrapper's clock
reads); against a loop whose Python time is known this errs by +0.05 to +0.1 us per
native call (toward more Python time). The wrappers cost host time of their own, so
they are in place for half of the timed iterations only: those give the c++ and py columns (the
Python time taken within each call, so the GPU's variation between calls cancels), the
others the wall time and the host time of the call. The two halves
run one after the other, each after --warmup untimed iterations: putting wrappers on a
class or taking them off resets the interpreter's caches of its attributes, which the
first calls after pay again (a user's program, which patches nothing, never does). If a
call reaches none of the native callables, its native and Python columns say "-".

One process per GPU, started by torchrun (NCCL for the group):
    torchrun --nproc-per-node 2 tools/deep_ep_bench.py --mode both \\
        --ht-tokens 4096 --ll-tokens 128 --hidden 7168 --topk 8 --ht-experts 256 \\
        --ll-experts 288 --fp8
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

import torch
import torch.distributed as dist

PROG = "deep_ep_bench"
EXTENSION_PREFIX = "courier._"  # the nanobind extension module(s) of the courier package


class OneLineParser(argparse.ArgumentParser):
    # A one-line error (no usage dump) is easier to spot in a benchmark log.
    def error(self, message):
        fail(message)


def fail(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(2)


def token_list(text: str) -> List[int]:
    try:
        values = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma list of integers: {text!r}")
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"token counts must be positive: {text!r}")
    return values


def parse_args(argv: List[str]) -> argparse.Namespace:
    p = OneLineParser(prog=PROG, description="courier.deep_ep dispatch/combine benchmark")
    p.add_argument("--mode", choices=["ht", "ll", "both"], default="both")
    p.add_argument("--tokens", type=token_list, help="tokens per rank for every mode run")
    p.add_argument("--ht-tokens", type=token_list, default=[32, 64, 128])
    p.add_argument("--ll-tokens", type=token_list, default=[32, 64, 128])
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--topk", type=int, default=4)
    p.add_argument("--experts", type=int, help="experts for every mode run")
    p.add_argument("--ht-experts", type=int, default=16)
    p.add_argument("--ll-experts", type=int, default=16)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--fp8", action="store_true", help="ll: FP8 dispatch (use_fp8), BF16 combine")
    p.add_argument("--unmasked", action="store_true", help="no -1 entries in the routing")
    p.add_argument("--json", action="store_true", help="one JSON object per row instead of the table")
    p.add_argument("--backend", choices=["nccl", "gloo"], default="nccl")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    args = p.parse_args(argv)
    if args.tokens:
        args.ht_tokens = args.ll_tokens = args.tokens
    if args.experts:
        args.ht_experts = args.ll_experts = args.experts
    if args.iters < 2 or args.warmup < 0:
        fail("--iters must be at least 2 (half of them time the native calls) and --warmup at "
             "least 0")
    if args.hidden < 1 or args.topk < 1:
        fail("--hidden and --topk must be positive")
    if args.fp8 and args.hidden % 128 != 0:
        fail(f"--fp8 needs --hidden a multiple of 128, not {args.hidden}")
    for name in ("ht_experts", "ll_experts"):
        if args.topk > getattr(args, name):
            fail(f"--topk {args.topk} exceeds --{name.replace('_', '-')} {getattr(args, name)}")
    return args


# ---------------------------------------------------------------- native-call timing


class TimerLayer:
    """One layer of timing wrappers: the seconds inside the calls it wrapped and how many
    there were. Nested native calls (a native call that calls back into Python that calls
    another) count once."""

    __slots__ = ("seconds", "calls", "depth")

    def __init__(self) -> None:
        self.seconds, self.calls, self.depth = 0.0, 0, 0

    def wrap(self, fn: Callable) -> Callable:
        layer = self

        def wrapper(*args, **kwargs):
            layer.depth += 1
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                end = time.perf_counter()
                layer.depth -= 1
                if layer.depth == 0:
                    layer.seconds += end - start
                    layer.calls += 1

        return wrapper

    def take(self) -> "tuple[float, int]":
        taken = (self.seconds, self.calls)
        self.seconds, self.calls = 0.0, 0
        return taken


class NativeClock:
    """The time spent inside native (extension) calls, through two nested wrappers per
    callable, one per layer and made alike, so they cost alike (see the module's
    docstring): the inner layer's seconds are the native time (with the steps between its
    wrapper's clock reads), the outer layer's that plus one wrapper's whole cost."""

    def __init__(self) -> None:
        self.inner = TimerLayer()
        self.outer = TimerLayer()

    def timed(self, fn: Callable) -> Callable:
        wrapper = self.outer.wrap(self.inner.wrap(fn))
        wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
        return wrapper

    def take(self) -> "tuple[float, float, int]":
        """(native seconds, native plus one wrapper's cost, calls) since the last take."""
        inner, _ = self.inner.take()
        outer, calls = self.outer.take()
        return inner, outer, calls


# Kinds of callables that are an extension class's instance methods (nanobind, pybind11,
# CPython's own); wrapping them in a Python function keeps them methods.
METHOD_KINDS = {"nb_method", "instancemethod", "method_descriptor"}


class NativeTiming:
    """Times every native call `courier.deep_ep` can make: the methods of the extension
    module's classes (patched on the classes, so the Buffers the wrapper makes later are
    covered too) and its functions (also where `courier.deep_ep` imported them).
    Made installed; undo() restores everything, install() puts the wrappers back."""

    def __init__(self, deep_ep: types.ModuleType, clock: NativeClock):
        self.classes = 0
        self.functions = 0
        self._undo: List[Callable[[], None]] = []
        self._redo: List[Callable[[], None]] = []
        extensions = [m for name, m in list(sys.modules.items())
                      if name.startswith(EXTENSION_PREFIX) and isinstance(m, types.ModuleType)]
        for module in extensions:
            for name, value in list(vars(module).items()):
                if name.startswith("__"):
                    continue
                if isinstance(value, type):
                    if self._wrap_methods(value, clock):
                        self.classes += 1
                elif callable(value) and self._replace(module, name, value, clock.timed(value)):
                    self.functions += 1
        for name, value in list(vars(deep_ep).items()):
            origin = getattr(value, "__module__", "") or ""
            if (callable(value) and not isinstance(value, type) and not name.startswith("__")
                    and origin.startswith(EXTENSION_PREFIX)):
                if self._replace(deep_ep, name, value, clock.timed(value)):
                    self.functions += 1

    def _wrap_methods(self, cls: type, clock: NativeClock) -> bool:
        wrapped = False
        for name, value in list(vars(cls).items()):
            if name.startswith("__"):
                continue
            if isinstance(value, property) and value.fget is not None:
                # A native getter (a result's tensors, the per-expert count list
                # it builds) is a native call too.
                timed = property(clock.timed(value.fget), value.fset, value.fdel, value.__doc__)
                wrapped = self._replace(cls, name, value, timed) or wrapped
            elif type(value).__name__ in METHOD_KINDS:
                wrapped = self._replace(cls, name, value, clock.timed(value)) or wrapped
        return wrapped

    def _replace(self, owner: Any, name: str, old: Any, new: Any) -> bool:
        try:
            setattr(owner, name, new)
        except (AttributeError, TypeError):
            return False  # read-only: left untimed ("-" if a call reaches nothing else)
        self._undo.append(lambda: setattr(owner, name, old))
        self._redo.append(lambda: setattr(owner, name, new))
        return True

    installed = True

    def undo(self) -> None:
        if self.installed:
            for restore in reversed(self._undo):
                restore()
            self.installed = False

    def install(self) -> None:
        if not self.installed:
            for wrap in self._redo:
                wrap()
            self.installed = True


# ---------------------------------------------------------------- measurement


@dataclass
class Series:
    phase: str
    wall_us: List[float] = field(default_factory=list)  # call until GPU work done
    native_us: List[float] = field(default_factory=list)  # iterations with the wrappers
    host_us: List[float] = field(default_factory=list)  # call until it returns, without
    python_us: List[float] = field(default_factory=list)  # wrapped: host - native - wrappers
    native_seen: bool = True
    bytes: float = 0.0


def percentile(values: List[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def median(values: List[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


class Timer:
    """Times one call per __call__; `wrapped` says whether the native wrappers are in
    place for it (then only its native time is kept)."""

    def __init__(self, group, device: torch.device, clock: NativeClock, timing: NativeTiming):
        self.group, self.device, self.clock, self.timing = group, device, clock, timing
        self.window_us = window_cost_us()

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def __call__(self, series: Series, record: bool, call: Callable[[], Any],
                 wrapped: bool) -> Any:
        # As courier-bench: every rank starts the call together.
        (self.timing.install if wrapped else self.timing.undo)()
        dist.barrier(group=self.group)
        self.sync()
        self.clock.take()
        start = time.perf_counter()
        result = call()
        returned = time.perf_counter()
        self.sync()
        done = time.perf_counter()
        native, with_wrapper, calls = self.clock.take()
        if record and wrapped:
            series.native_us.append(native * 1e6)
            # The inner wrappers, as much for the outer ones less their windows.
            wrappers = 2 * (with_wrapper - native) * 1e6 - calls * self.window_us
            series.python_us.append((returned - start - native) * 1e6 - wrappers)
            series.native_seen = series.native_seen and calls > 0
        elif record:
            series.wall_us.append((done - start) * 1e6)
            series.host_us.append((returned - start) * 1e6)
        return result


def window_cost_us() -> float:
    """The host time a wrapper spends between its two clock reads besides the call it
    wraps (median of rounds: a cheap native function through the inner wrapper, against
    the same calls made directly)."""
    from courier import _courier
    plain = getattr(_courier.has_dlpack_exchange_api, "__wrapped__",
                    _courier.has_dlpack_exchange_api)
    clock = NativeClock()
    fn = clock.timed(plain)
    tensor = torch.Tensor
    n = 2000
    rounds = []
    for _ in range(15):
        clock.take()
        for _ in range(n):
            fn(tensor)
        inner, _, _ = clock.take()
        start = time.perf_counter()
        for _ in range(n):
            plain(tensor)
        direct = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(n):  # the loop's own cost, not the call's
            tensor
        loop = time.perf_counter() - start
        rounds.append((inner - (direct - loop)) / n * 1e6)
    return median(rounds)


def phases(args) -> List["tuple[bool, bool]"]:
    """(record, wrapped) per iteration: the unwrapped half (host and wall time), then the
    wrapped half (native time), each after --warmup iterations that are not recorded."""
    half = args.iters // 2
    return [(i >= args.warmup, wrapped) for wrapped, n in ((False, args.iters - half),
                                                           (True, half))
            for i in range(args.warmup + n)]


def random_routing(tokens: int, topk: int, experts: int, masked: bool, gen, device) -> torch.Tensor:
    """courier-bench's rule: top-k distinct random experts per token, each choice masked
    (-1) with probability 1/8 unless --unmasked."""
    scores = torch.rand((tokens, experts), generator=gen, device=device)
    idx = scores.topk(topk, dim=1, sorted=False).indices.to(torch.int64)
    if masked:
        drop = torch.randint(0, 8, (tokens, topk), generator=gen, device=device) == 0
        idx = idx.masked_fill(drop, -1)
    return idx


def gather(group, tensor: torch.Tensor, num_ranks: int) -> torch.Tensor:
    flat = torch.empty(num_ranks * tensor.numel(), dtype=tensor.dtype, device=tensor.device)
    dist.all_gather_into_tensor(flat, tensor.contiguous().reshape(-1), group=group)
    return flat.view(num_ranks, *tensor.shape)


def bench_ht(deep_ep, args, env, timer) -> List[Dict[str, Any]]:
    R, me, dev = env["ranks"], env["rank"], env["device"]
    T_max, H = max(args.ht_tokens), args.hidden
    experts = args.ht_experts
    row_bytes = H * 2
    nvl_bytes = max(int(1e9), 4 * R * T_max * (row_bytes + args.topk * 12 + 64))
    buffer = deep_ep.Buffer(env["group"], nvl_bytes, 0)
    rows = []
    for tokens in args.ht_tokens:
        gen = torch.Generator(device=dev)
        gen.manual_seed(7919 * me + tokens)
        x = torch.randn((tokens, H), generator=gen, device=dev).to(torch.bfloat16)
        idx = random_routing(tokens, args.topk, experts, not args.unmasked, gen, dev)
        weights = torch.rand((tokens, args.topk), generator=gen, device=dev)
        per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(idx, experts)
        all_per_rank = gather(env["group"], per_rank.to(torch.int64), R)  # [src, dst]
        dispatch_bytes = float(sum(int(all_per_rank[me][d]) for d in range(R) if d != me) * row_bytes)
        combine_bytes = float(sum(int(all_per_rank[s][me]) for s in range(R) if s != me) * row_bytes)
        d = Series("dispatch", bytes=dispatch_bytes)
        c = Series("combine", bytes=combine_bytes)
        for record, wrapped in phases(args):
            recv_x, _, _, _, handle, _ = timer(d, record, lambda: buffer.dispatch(
                x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
                num_tokens_per_expert=per_expert, topk_idx=idx, topk_weights=weights), wrapped)
            timer(c, record, lambda: buffer.combine(recv_x, handle), wrapped)
            del recv_x, handle
        rows += [summarize("ht", tokens, s, args) for s in (d, c)]
    del buffer
    gc.collect()
    dist.barrier(group=env["group"])
    return rows


def bench_ll(deep_ep, args, env, timer) -> List[Dict[str, Any]]:
    R, me, dev = env["ranks"], env["rank"], env["device"]
    T_max, H = max(args.ll_tokens), args.hidden
    experts = args.ll_experts
    per = experts // R
    row_bytes = H * 2
    sent_row_bytes = H + H // 128 * 4 if args.fp8 else row_bytes
    rdma_bytes = deep_ep.Buffer.get_low_latency_rdma_size_hint(T_max, H, R, experts)
    buffer = deep_ep.Buffer(env["group"], 0, rdma_bytes, low_latency_mode=True, num_qps_per_rank=per)
    rows = []
    for tokens in args.ll_tokens:
        gen = torch.Generator(device=dev)
        gen.manual_seed(7919 * me + tokens)
        x = torch.randn((tokens, H), generator=gen, device=dev).to(torch.bfloat16)
        idx = random_routing(tokens, args.topk, experts, not args.unmasked, gen, dev)
        weights = torch.rand((tokens, args.topk), generator=gen, device=dev)
        owner = torch.where(idx >= 0, idx // per, torch.full_like(idx, -1))
        dispatch_bytes = float(int(((owner >= 0) & (owner != me)).sum()) * sent_row_bytes)
        all_owner = gather(env["group"], owner, R)
        combine_bytes = float(sum(int((all_owner[s] == me).sum()) for s in range(R) if s != me) * row_bytes)
        y = torch.zeros((per, R * T_max, H), dtype=torch.bfloat16, device=dev)
        d = Series("dispatch", bytes=dispatch_bytes)
        c = Series("combine", bytes=combine_bytes)
        for record, wrapped in phases(args):
            _, _, handle, _, _ = timer(d, record, lambda: buffer.low_latency_dispatch(
                x, idx, T_max, experts, use_fp8=args.fp8), wrapped)
            timer(c, record, lambda: buffer.low_latency_combine(y, idx, weights, handle), wrapped)
            del handle
        rows += [summarize("ll-fp8" if args.fp8 else "ll", tokens, s, args) for s in (d, c)]
    del buffer
    gc.collect()
    dist.barrier(group=env["group"])
    return rows


def summarize(mode: str, tokens: int, s: Series, args) -> Dict[str, Any]:
    med = median(s.wall_us)
    experts = args.ht_experts if mode == "ht" else args.ll_experts
    return {
        "bench": "ep", "mode": mode, "phase": s.phase, "path": "python",
        "provider": os.environ.get("COURIER_OFI_PROVIDER", ""),
        "tokens": tokens, "hidden": args.hidden, "topk": args.topk, "experts": experts,
        "ranks": dist.get_world_size(), "iters": len(s.wall_us), "bytes": s.bytes,
        "median_us": med, "p99_us": percentile(s.wall_us, 0.99),
        "gbytes_per_s": s.bytes / (med * 1e3) if med > 0 else 0.0,
        "native_median_us": median(s.native_us) if s.native_seen else None,
        "host_median_us": median(s.host_us),
        "python_overhead_us": median(s.python_us) if s.native_seen else None,
    }


HEADER = ("{:<5} {:<6} {:<9} {:<14} {:>7} {:>7} {:>5} {:>8} {:>6} {:>6} {:>11} {:>11} {:>9} "
          "{:>9} {:>8}")


def print_rows(rows: List[Dict[str, Any]], as_json: bool) -> None:
    if as_json:
        for r in rows:
            print(json.dumps(r, separators=(",", ":")), flush=True)
        return
    print(HEADER.format("bench", "mode", "phase", "path", "tokens", "hidden", "topk", "experts",
                        "ranks", "iters", "median us", "p99 us", "GB/s", "c++ us", "py us"))
    for r in rows:
        native = "-" if r["native_median_us"] is None else f"{r['native_median_us']:.1f}"
        overhead = "-" if r["python_overhead_us"] is None else f"{r['python_overhead_us']:.1f}"
        print(HEADER.format(r["bench"], r["mode"], r["phase"], r["path"], r["tokens"], r["hidden"],
                            r["topk"], r["experts"], r["ranks"], r["iters"],
                            f"{r['median_us']:.1f}", f"{r['p99_us']:.1f}",
                            f"{r['gbytes_per_s']:.3f}", native, overhead), flush=True)
    if any(r["python_overhead_us"] is None for r in rows):
        print("py us '-': no native courier call was seen inside that call", flush=True)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        if name not in os.environ:
            fail(f"{name} is not set: start with 'torchrun --nproc-per-node 2 {sys.argv[0]} ...'")
    local_rank = int(os.environ["LOCAL_RANK"])
    if args.device == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        dist.init_process_group(args.backend, device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group(args.backend)
    R = dist.get_world_size()
    for name in ("ht_experts", "ll_experts"):
        if getattr(args, name) % R != 0:
            fail(f"--{name.replace('_', '-')} {getattr(args, name)} is not a multiple of the {R} ranks")
    import courier.deep_ep as deep_ep  # after the process group: the library's import is not timed

    env = {"rank": dist.get_rank(), "ranks": R, "device": device,
           "group": dist.new_group(list(range(R)))}
    clock = NativeClock()
    timing = NativeTiming(deep_ep, clock)
    timer = Timer(env["group"], device, clock, timing)
    rows: List[Dict[str, Any]] = []
    try:
        if args.mode in ("ht", "both"):
            rows += bench_ht(deep_ep, args, env, timer)
        if args.mode in ("ll", "both"):
            rows += bench_ll(deep_ep, args, env, timer)
    finally:
        timing.undo()
    if env["rank"] == 0:
        print_rows(rows, args.json)
    dist.barrier(group=env["group"])
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
