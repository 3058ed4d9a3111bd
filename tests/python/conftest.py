"""Shared helpers of the courier Python tests (pytest, host backend, numpy)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from typing import Dict, Iterator, List, Tuple

import pytest

import courier

HERE = os.path.dirname(os.path.abspath(__file__))

# tests/python/gpu holds torchrun programs for the GPU host, not pytest tests.
collect_ignore = ["gpu"]

# Every test runs on CPU threads over libfabric shm, with few proxy threads
# (2 shared cores in CI), also on a machine that has a GPU.
HOST_ENV: Dict[str, str] = {
    "COURIER_GPU_BACKEND": "host",
    "COURIER_NIC_BACKEND": "ofi",
    "COURIER_OFI_PROVIDER": "shm",
    "COURIER_PROXY_THREADS": "1",
    "COURIER_CHANNELS": "4",
}


@pytest.fixture(autouse=True)
def host_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """Single-process tests use the same backends as the multi-rank ones."""
    for name, value in HOST_ENV.items():
        monkeypatch.setenv(name, value)
    for name in ("COURIER_RANK", "COURIER_WORLD_SIZE", "COURIER_BOOTSTRAP", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)


@contextlib.contextmanager
def one_rank_low_latency_buffer() -> Iterator["courier.deep_ep.Buffer"]:
    """A one-rank job (no launcher variables) on the host backends, a
    courier.deep_ep Buffer sized for 16 tokens of hidden 128 over 4 experts,
    low-latency mode allowed; destroyed on leaving."""
    from courier import deep_ep

    mp = pytest.MonkeyPatch()
    for name, value in HOST_ENV.items():
        mp.setenv(name, value)
    rdma = deep_ep.Buffer.get_low_latency_rdma_size_hint(16, 128, 1, 4)
    made = deep_ep.Buffer(None, num_rdma_bytes=rdma, low_latency_mode=True,
                          explicitly_destroy=True)
    try:
        yield made
    finally:
        made.destroy()
        mp.undo()


def run_ranks(ranks: int, args: List[str], timeout: int = 300) -> subprocess.CompletedProcess:
    """Runs `python tests/python/ep_ranks.py ARGS` on `ranks` ranks through
    courier-run (python -m courier.run) and returns the finished process."""
    env = dict(os.environ, **HOST_ENV)
    command = [sys.executable, "-m", "courier.run", "--timeout", str(timeout), "-n", str(ranks),
               sys.executable, os.path.join(HERE, "ep_ranks.py")] + args
    print("running:", " ".join(command))
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout + 60)


def run_ranks_as_torchrun(ranks: int, args: List[str], timeout: int = 300) -> List[Tuple[int, str]]:
    """Starts `python tests/python/ep_ranks.py ARGS` on `ranks` processes
    with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK,
    LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and no COURIER_JOB_TOKEN or
    courier-run variables; returns each rank's (exit status, output)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("COURIER_") or k in ("COURIER_BACKEND_PATH", "COURIER_RUN")}
    env.update(HOST_ENV, MASTER_ADDR="127.0.0.1", MASTER_PORT="29577", WORLD_SIZE=str(ranks),
               LOCAL_WORLD_SIZE=str(ranks))
    command = [sys.executable, os.path.join(HERE, "ep_ranks.py")] + args
    print("running on", ranks, "ranks:", " ".join(command))
    procs = [subprocess.Popen(command, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(ranks)]
    results = []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        results.append((proc.returncode, out))
    return results
