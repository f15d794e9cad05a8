"""NCCL_DEBUG=INFO transport parsing and its judgement (tests/data: logs written in NCCL's own format)."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.burnin.collectives import judge_transport
from provision.burnin.launch import NodeRun
from provision.checks.outcome import Outcome
from provision.facts.nccl_debug import parse_nccl_debug
from provision.hosts.remote import CommandResult

pytestmark = pytest.mark.fast  # pure: part of make test-fast

DATA = Path(__file__).parents[1] / "data"


def test_ib_with_gpudirect_is_parsed() -> None:
    found = parse_nccl_debug((DATA / "nccl_debug_ib.log").read_text())
    assert found.networks == {"IB"}
    assert found.ib_devices == ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]
    assert (found.channels_ib, found.channels_ib_gdr, found.channels_socket) == (4, 4, 0)


def test_socket_fallback_is_parsed() -> None:
    found = parse_nccl_debug((DATA / "nccl_debug_socket.log").read_text())
    assert found.networks == {"Socket"} and found.ib_devices == []
    assert found.channels_socket == 2 and found.channels_ib == 0


def _run(log: str, device: str = "cuda:0") -> NodeRun:
    text = (DATA / log).read_text() if log else ""
    return NodeRun("gpu-a17", 0, CommandResult(("python3",), 0, text, "", 1.0),
                   records=[{"type": "result", "local_rank": 0, "device": device}])


@pytest.mark.parametrize("log,gpudirect,outcome,words", [
    ("nccl_debug_ib.log", True, Outcome.OK, "GPUDirect"),
    ("nccl_debug_socket.log", True, Outcome.FAILED, "sockets"),
    ("nccl_debug_ib_no_gdr.log", True, Outcome.FAILED, "without GPUDirect"),
    ("nccl_debug_ib_no_gdr.log", False, Outcome.OK, "InfiniBand"),
    ("", True, Outcome.UNKNOWN, "no NCCL INFO lines"),
])
def test_transport_judgement(log: str, gpudirect: bool, outcome: Outcome, words: str) -> None:
    result = judge_transport(_run(log), gpudirect=gpudirect)
    assert result.outcome is outcome and words in result.message


def test_gloo_has_no_transport_to_check() -> None:
    assert judge_transport(_run("nccl_debug_socket.log", device="cpu"), gpudirect=True).outcome is Outcome.SILENCED
