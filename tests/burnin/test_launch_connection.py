"""A connection that drops under a node's agent is ours: the launch runs again on fresh sessions, and if it drops
again the node is ``unknown`` with that reason, never failed as if its hardware had stopped the test.

The sessions here stand in for SSH only in what they return (paramiko's "no exit status", which
:class:`provision.hosts.remote.SshSession` turns into ``lost``; tests/hosts/test_connection.py shows that on a real
sshd); the agents' output is what the simulator's real agents printed in a recorded healthy launch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fabric_tests.protocol import MARKER
from provision.burnin import collectives, records
from provision.burnin import launch as launch_module
from provision.checks.outcome import Outcome
from provision.hosts.remote import CommandResult
from provision.spec import load_spec
from tests.launches import load, scenario_spec

pytestmark = pytest.mark.fast


class _Sessions:
    """Each node's agent answers with its recorded output, after ``drops`` launches whose connection dropped."""

    def __init__(self, recorded: dict[str, list[dict[str, Any]]], drops: dict[str, int]) -> None:
        self.recorded, self.drops, self.opened = recorded, dict(drops), 0

    def __call__(self, loaded: Any, node: Any, state_dir: Path) -> Any:
        self.opened += 1
        sessions = self

        class _Session:
            host = node.name

            def run(self, argv: list[str], timeout_s: float, *, become: bool = False) -> CommandResult:
                if sessions.drops.get(node.name, 0) > 0:
                    sessions.drops[node.name] -= 1
                    return CommandResult(tuple(argv), -1, "", "", 0.1, lost=True)
                stdout = "".join(MARKER + json.dumps(record) + "\n" for record in sessions.recorded[node.name])
                return CommandResult(tuple(argv), 0, stdout, "", 1.0)

            def close(self) -> None:
                return None

        return _Session()


def _launch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, drops: dict[str, int]) -> tuple[Any, _Sessions]:
    recording = load("healthy")
    first = recording["launches"][0]
    loaded = load_spec(scenario_spec(tmp_path, [], recording["hosts"]))
    sessions = _Sessions({run["node"]: run["records"] for run in first["runs"]}, drops)
    monkeypatch.setattr(launch_module, "open_session", sessions)
    nodes = [node for node in loaded.nodes if node.name in first["nodes"]]
    result = launch_module.launch(loaded, tmp_path, nodes, test=first["test"], nproc=first["nproc"],
                                  params=collectives.collective_params(loaded), deadline_s=60, port=23000)
    return result, sessions


def test_a_connection_dropped_once_is_launched_again_and_judged_as_measured(tmp_path, monkeypatch) -> None:
    result, sessions = _launch(tmp_path, monkeypatch, {"sim02": 1})
    assert sessions.opened == 2 * len(result.nodes)  # the whole world again: its ranks had lost a peer
    assert not any(run.unfinished for run in result.nodes)
    assert records.lost_nodes(result, check="collectives", doing="inside a collective", timeout_s=10,
                                when="attempt 1") == {}


def test_a_connection_that_keeps_dropping_leaves_the_node_unknown_not_failed(tmp_path, monkeypatch) -> None:
    result, _ = _launch(tmp_path, monkeypatch, {"sim02": launch_module.LAUNCH_ATTEMPTS})
    lost = records.lost_nodes(result, check="collectives", doing="inside a collective", timeout_s=10,
                                when="attempt 1")
    assert set(lost) == {"sim02"}
    (check,) = lost["sim02"]
    assert check.outcome is Outcome.UNKNOWN and "dropped" in check.message and "ours" in check.message, check
