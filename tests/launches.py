"""Launches recorded once from the simulated cluster's real workers, replayed into the stages' judgements.

A *recording* is what every launch of one stage run said: the test, the nodes in order, and each node's records
(what its agent and workers printed) and command outcome. :class:`Recorder` wraps the real :func:`launch`;
:class:`Replay` is a :class:`~provision.burnin.launch.Launcher` that gives each launch the stage asks for the
recorded answer to the same question (test and nodes), so the collectives branches — a hang, a straggler, wrong
sums found by group testing, a slow rail pinned by pairing, workers that failed — are judged in milliseconds on
what real workers really said.

Written by ``python -m tests.record_launches`` (see there); a change to the agents' records means recording
again, and the replay tests then say what the change did to the verdicts.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.burnin.launch import Launcher, LaunchResult, NodeRun
from provision.hosts.remote import CommandResult
from tests.simhelpers import shrink_to_four_gpus, write_spec

HERE = Path(__file__).resolve().parent / "data" / "launches"


def _key(test: str, nodes: list[str]) -> str:
    return f"{test}:{','.join(nodes)}"


@dataclass
class Recorder:
    """A launcher that launches for real and keeps what came back."""

    launcher: Launcher
    launches: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, loaded: Any, state_dir: Path, nodes: list[Any], **kwargs: Any) -> LaunchResult:
        result = self.launcher(loaded, state_dir, nodes, **kwargs)
        entry = {"test": result.test, "nproc": result.nproc, "nodes": [run.node for run in result.nodes],
                 "runs": [{"node": run.node, "node_rank": run.node_rank, "connect_error": run.connect_error,
                           "records": run.records,
                           "command": None if run.command is None else {
                               "argv": list(run.command.argv[:3]), "rc": run.command.rc, "stdout": "",
                               "stderr": run.command.stderr[-4000:], "seconds": round(run.command.seconds, 2),
                               "timed_out": run.command.timed_out}} for run in result.nodes]}
        with self.lock:
            self.launches.append(entry)
        return result


class Replay:
    """A launcher answering each launch with the recorded one for the same test and nodes, in recorded order."""

    def __init__(self, recording: dict[str, Any]) -> None:
        self.pending: dict[str, list[dict[str, Any]]] = {}
        for entry in recording["launches"]:
            self.pending.setdefault(_key(entry["test"], entry["nodes"]), []).append(entry)
        self.lock = threading.Lock()

    def __call__(self, loaded: Any, state_dir: Path, nodes: list[Any], *, test: str, nproc: int,
                 params: dict[str, Any], deadline_s: float, port: int | None = None,
                 separate: bool = False) -> LaunchResult:
        key = _key(test, [node.name for node in nodes])
        with self.lock:
            recorded = self.pending.get(key)
            if not recorded:
                raise AssertionError(f"no recorded launch of {key}: the stage asks what was not recorded "
                                     "(record again: python -m tests.record_launches)")
            entry = recorded.pop(0)
        runs = [NodeRun(run["node"], run["node_rank"], records=run["records"], connect_error=run["connect_error"],
                        command=None if run["command"] is None else CommandResult(
                            **{**run["command"], "argv": tuple(run["command"]["argv"])}))
                for run in entry["runs"]]
        return LaunchResult(entry["test"], runs, entry["nproc"])


def load(name: str) -> dict[str, Any]:
    return json.loads((HERE / f"{name}.json").read_text())


def scenario_spec(directory: Path, faults: list[dict[str, Any]], hosts: str) -> Path:
    """The spec a scenario is recorded on and replayed against: four GPUs and two ranks a host, the collectives
    stage alone, NCCL's completion semantics."""
    return shrink_to_four_gpus(write_spec(directory, faults, hosts=hosts, stages=["collectives"],
                                          collective_semantics="nccl"))

