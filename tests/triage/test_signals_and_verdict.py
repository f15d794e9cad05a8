"""The triage's parts one by one (the command end to end is tests/triage/test_triage.py): which line is which
signature, whose host a file is, what a verdict makes of the signatures, and the flight recorder's dumps."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from provision.triage.flight_recorder import load_dump, missing_ranks, rank_of
from provision.triage.signals import Signal, attributed, host_of_file, is_hostname, read_log
from provision.triage.verdict import judge

pytestmark = pytest.mark.fast
OURS = Path(__file__).parents[1] / "data" / "triage"


def test_each_line_is_read_as_its_signature() -> None:
    text = "\n".join([
        "iteration 100 | loss 2.1",
        "srun: error: Node failure on gpu-d14",
        "gpu-a01:1234:1300 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB",
        "gpu-a01:1234:1300 [0] NCCL WARN NET/IB : Got completion from peer 10.40.2.9<41234> with error 12, "
        "opcode 0, len 0, vendor err 129",
        "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE, "
        "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600030 milliseconds before timing out.",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    ])
    signals, lines = read_log(text, "job.out")
    assert lines == 6
    kinds = [(signal.kind, signal.host, signal.source) for signal in signals]
    assert kinds == [("node_failure", "gpu-d14", "job.out:2"), ("ib_completion_error", None, "job.out:4"),
                     ("watchdog_timeout", None, "job.out:5"), ("cuda_error", None, "job.out:6")]
    ib = signals[1]
    assert (ib.peer, ib.reporter, ib.code) == ("10.40.2.9", "gpu-a01", 12)
    assert (signals[2].rank, signals[2].seq) == (3, 812)


def test_a_files_host_is_given_only_to_lines_that_name_none() -> None:
    signals, _ = read_log("RuntimeError: CUDA error: unspecified launch failure\nsrun: error: Node failure on gpu-x2",
                          "gpu-x1.out", host="gpu-x1")
    assert [(signal.kind, signal.host) for signal in signals] == [("cuda_error", "gpu-x1"), ("node_failure", "gpu-x2")]
    refused = Signal("peer_refused", None, "a:1", "...", peer="10.0.0.2")
    assert attributed([refused], "gpu-x1")[0].reporter == "gpu-x1"
    assert attributed([refused], None) == [refused]


def test_the_longest_known_host_in_a_file_name_is_its_host() -> None:
    known = {"gpu-a1", "gpu-a12", "gpu-b3"}
    assert host_of_file("dmesg_gpu-a12.txt", known) == "gpu-a12"
    assert host_of_file("slurm-20417.out", known) is None
    assert is_hostname("gpu-a12.cluster.local") and not is_hostname("not a host")


def test_a_verdict_blames_the_lost_node_strongly_and_a_one_sided_link_on_nobody() -> None:
    signals, lines = read_log((OURS / "srun_node_failure" / "slurm-20417.out").read_text(), "slurm-20417.out")
    found = judge(signals, {}, files=1, lines=lines)
    assert [(culprit.who, culprit.strength) for culprit in found.culprits] == [("gpu-d14", "strong")]
    assert found.conclusive
    link = Signal("ib_completion_error", None, "n:1", "...", peer="10.40.2.9", reporter="gpu-c01", code=12)
    found = judge([link], {"10.40.2.9": "gpu-c09"})
    assert found.culprits == [] and "between gpu-c01 and gpu-c09" in found.links[0]
    assert not judge([], {}).conclusive, "no signature: inconclusive, never healthy"


def test_flight_recorder_dumps_name_the_rank_the_others_waited_for() -> None:
    dumps = {rank_of(path.name): load_dump(path.read_bytes())
             for path in sorted((OURS / "flight_recorder").iterdir()) if rank_of(path.name) is not None}
    assert sorted(dumps) == [0, 1, 2, 3]
    missing, _idle = missing_ranks(dumps)  # type: ignore[arg-type]
    assert [(entry.rank, entry.seq, entry.waiting) for entry in missing] == [(3, 8, (0, 1, 2))]


def test_a_dump_that_asks_for_any_global_is_refused_unread() -> None:
    assert rank_of("nccl_trace_rank_dump12") == 12 and rank_of("notes.txt") is None
    with pytest.raises(ValueError, match="refused"):
        load_dump(pickle.dumps(Path("/etc/passwd")))
    with pytest.raises(ValueError, match="not a flight recorder dump"):
        load_dump(pickle.dumps({"something": "else"}))
    with pytest.raises(ValueError, match="not a flight recorder dump"):
        load_dump(b"\x00garbage")
