"""The burn-in's programs on a node, run in this process as a world of one rank on the CPU (gloo over loopback):
what each returns and emits. Many ranks over the simulated cluster are the burn-in tests' (tests/burnin/)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from fabric_tests import busbw_reference, collectives, devices, protocol, training

pytestmark = pytest.mark.slow  # torch and its process groups in this process: seconds, in make test only


def _context(params: dict[str, Any]) -> dict[str, Any]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return {"rank": 0, "local_rank": 0, "node_rank": 0, "nproc": 1, "nnodes": 1, "master_addr": "127.0.0.1",
            "master_port": port, "params": params}


def _records(text: str, kind: str) -> list[dict[str, Any]]:
    return [record for record in protocol.parse(text) if record["type"] == kind]


def test_a_cpu_worker_drives_the_cpu_through_gloo() -> None:
    device = devices.device_for(0)
    assert (device.type, devices.backend()) == ("cpu", "gloo")
    assert devices.cuda_runtime() == {"cuda_build": None}, "this machine's torch is a CPU build"
    assert devices.compute_clock(device) is not None
    devices.synchronize(device)  # a no-op on the CPU, never an error


def test_collectives_measure_every_op_and_size_and_say_if_each_was_correct(capsys: pytest.CaptureFixture[str]) -> None:
    params = {"ops": ["all_reduce", "all_gather"], "sizes": [4096, 65536], "warmup": 1, "iters": 2, "timeout_s": 30}
    result = collectives.run(_context(params))
    measured = _records(capsys.readouterr().out, "measurement")
    assert result["measurements"] == 4 == len(measured) and result["device"] == "cpu"
    assert {(record["op"], record["bytes"]) for record in measured} == {
        (op, size) for op in params["ops"] for size in params["sizes"]}
    assert all(record["correct"] and record["time_us"] > 0 and record["ranks"] == 1 for record in measured)


def test_the_reference_measurement_is_taken_beside_ours(capsys: pytest.CaptureFixture[str]) -> None:
    params = {"sizes": [4096], "repeats": 2, "warmup": 1, "iters": 2, "timeout_s": 30}
    assert busbw_reference.run(_context(params)) == {"device": "cpu"}
    out = capsys.readouterr().out
    assert len(_records(out, "measurement")) == len(_records(out, "reference")) == 2
    assert all(record["time_us"] > 0 for record in _records(out, "reference"))


def test_a_checkpoint_folder_the_nodes_do_not_share_is_named(tmp_path: Path) -> None:
    training.prove_shared(str(tmp_path), node_rank=0, nnodes=1, timeout_s=1)  # alone: its own folder is shared
    with pytest.raises(RuntimeError, match=r"is not shared between the nodes: node 1 does not see .* \[0\]"):
        training.prove_shared(str(tmp_path / "own"), node_rank=1, nnodes=2, timeout_s=0.5)
