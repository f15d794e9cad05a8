"""NCCL_DEBUG=INFO transport parsing and its judgement (tests/data: logs written in NCCL's own format)."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.burnin.collectives import judge_transport
from provision.burnin.launch import NodeRun
from provision.checks.outcome import Outcome
from provision.facts.nccl_debug import parse_nccl_debug, parse_nccl_domain
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


# A GB200 tray's ranks in a two-tray domain, in the lines NCCL 2.26 prints (src/init.cc's format strings; the MNNVL
# line as a GB200 tray printed it in NVIDIA/nccl#1769, the communicator line as in NCCL's public logs): our own logs.
@pytest.mark.parametrize("log,mnnvl,nvls,in_partition,troubles", [
    ("nccl_debug_mnnvl_nvls.log", True, True, [True] * 4, []),
    ("nccl_debug_mnnvl_nvls_off.log", True, False, [True] * 4, []),
    ("nccl_debug_mnnvl_gpu_out_of_partition.log", True, True, [True, True, False, True], []),
    ("nccl_debug_mnnvl_route_unhealthy.log", True, True, [True] * 4, ["route unhealthy"]),
    ("nccl_debug_mnnvl_off.log", False, True, [True] * 4, []),
])
def test_an_nvlink_domains_lines_are_parsed(log: str, mnnvl: bool, nvls: bool, in_partition: list[bool],
                                            troubles: list[str]) -> None:
    found = parse_nccl_domain((DATA / log).read_text())
    assert found.mnnvl is mnnvl and found.nvls is nvls
    assert [gpu.in_partition for gpu in found.gpus] == in_partition
    assert sorted({trouble for gpu in found.gpus for trouble in gpu.troubles}) == troubles
    assert len(found.comms) == 4 and {comm["nranks"] for comm in found.comms} == {8}


def test_the_lines_of_other_nccl_releases_are_read() -> None:
    """NCCL 2.18's NVLS line names no channel count; 2.27's says whether the transport is enabled."""
    older = parse_nccl_domain("h:1:2 [0] NCCL INFO NVLS multicast support is available on dev 0\n")
    newer = parse_nccl_domain("h:1:2 [0] NCCL INFO NVLS multicast support is available on dev 0, transport "
                              "disabled, symmetric multimem disabled\n")
    assert older.nvls is True and newer.nvls is False
    assert parse_nccl_domain("").mnnvl is None and parse_nccl_domain("").nvls is None
    healthy = parse_nccl_domain("h:1:2 [1] NCCL INFO MNNVL busId 0x901000 fabric UUID 3143b15bc2cd192b."
                                "28cc9b5473fb5b93 cliqueId 0x7ffe state 3 healthMask 0xaa\n")  # NVIDIA/nccl#1769
    assert healthy.gpus[0].in_partition and healthy.gpus[0].troubles == []
