"""courier.deep_ep across processes: courier-run -n 2 and -n 4, host
backend over libfabric shm, numpy tensors (tests/python/ep_ranks.py)."""

from __future__ import annotations

import re

import pytest

from conftest import run_ranks, run_ranks_as_torchrun

ml_dtypes = pytest.importorskip("ml_dtypes")


def passed_cases(output: str) -> dict:
    """{rank: [case, ...]} from the '[r] PASS case: ...' lines courier-run prints."""
    cases: dict = {}
    for rank, case in re.findall(r"^\[(\d+)\] PASS ([\w-]+):", output, re.MULTILINE):
        cases.setdefault(int(rank), []).append(case)
    return cases


def expect_pass(ranks: int, cases: list, extra: list = ()) -> None:
    result = run_ranks(ranks, list(extra) + cases)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    got = passed_cases(result.stdout)
    assert got == {r: cases for r in range(ranks)}, output


@pytest.mark.parametrize("ranks", [2, 4])
def test_layout_dispatch_combine(ranks: int) -> None:
    expect_pass(ranks, ["layout", "ht", "ht-bf16", "ht-fp8", "ht-no-topk", "ht-shapes",
                        "ht-zero-tokens"])


@pytest.mark.parametrize("ranks", [2, 4])
def test_low_latency(ranks: int) -> None:
    expect_pass(ranks, ["ll", "ll-fp8", "ll-fp8-round-scale", "ll-fp8-ue8m0", "ll-stale-hook",
                        "ll-logfmt", "ll-wait-cost"])


def test_layout_across_hosts(monkeypatch) -> None:
    """4 ranks as 2 hosts of 2 (COURIER_RANKS_PER_HOST): get_dispatch_layout
    fills num_tokens_per_rdma_rank, and dispatch and combine still work."""
    monkeypatch.setenv("COURIER_RANKS_PER_HOST", "2")
    expect_pass(4, ["layout", "ht"])


def test_errors_reach_every_rank() -> None:
    expect_pass(2, ["errors"])


def test_errors_on_four_ranks() -> None:
    expect_pass(4, ["errors"])


def test_process_group_bootstrap(tmp_path) -> None:
    """A group object's allgather/barrier carry Courier's bootstrap."""
    expect_pass(2, ["layout", "ht"], extra=[f"--file-group={tmp_path}"])


def test_process_group_bootstrap_needs_no_job_token(tmp_path) -> None:
    """Under torchrun with a group, the group is the bootstrap: no
    COURIER_JOB_TOKEN, and nothing listens at MASTER_PORT + 1."""
    cases = ["layout", "ht", "ht-no-topk"]
    results = run_ranks_as_torchrun(2, [f"--file-group={tmp_path}"] + cases)
    for rank, (status, output) in enumerate(results):
        assert status == 0, f"rank {rank}:\n{output}"
        passed = re.findall(r"^PASS ([\w-]+):", output, re.MULTILINE)
        assert passed == cases, f"rank {rank}:\n{output}"
