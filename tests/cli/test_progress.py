"""What the operator sees without a terminal, and the history: one progress line per event in a log;
``provision history NODE`` tells a node's story; ``provision runs`` lists what ran; ``--json`` on every move."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provision.cli import main
from provision.cli.progress import line_for

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(("event", "line"), [
    ({"event": "phase.started", "phase": "provision", "ts": "2026-11-23T19:01:02.345+00:00"},
     "19:01:02  -  provision  started"),
    ({"event": "provision.node", "node": "sim03", "passed": False, "failed_task": "Install the pinned driver",
      "message": "Version '535.183.01' for 'nvidia-driver-535' was not found", "ts": "2026-11-23T19:01:09+00:00"},
     "19:01:09  sim03  provision  FAILED  Install the pinned driver: Version '535.183.01' for 'nvidia-driver-535' "
     "was not found"),
    ({"event": "burnin.node", "node": "sim07", "stage": "preflight", "passed": False, "check": "xid",
      "reason": "Xid 79 on GPU 0000:18:00", "ts": "2026-11-23T19:03:00+00:00"},
     "19:03:00  sim07  burnin/preflight  FAILED  xid: Xid 79 on GPU 0000:18:00"),
    ({"event": "burnin.node", "node": "sim01", "stage": "node", "passed": True, "ts": "2026-11-23T19:04:00+00:00"},
     "19:04:00  sim01  burnin/node  passed"),
])
def test_progress_lines(event: dict, line: str) -> None:
    assert line_for(event) == line


def test_tasks_only_with_verbose() -> None:
    task = {"event": "task", "host": "sim01", "task": "Hold the driver", "outcome": "changed",
            "ts": "2026-11-23T19:01:05+00:00"}
    assert line_for(task) is None
    assert line_for(task, verbose=True) == "19:01:05  sim01  task  changed  Hold the driver"


def test_a_run_in_a_log_shows_its_progress_history_and_runs(sim_spec: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["apply", str(sim_spec), "--phases", "register"]) == 0
    log = capsys.readouterr().err  # not a terminal: one line per event
    assert "  -  register  started" in log and "  -  register  finished  add 16 new node(s)" in log
    assert "  -  run  succeeded  exit 0" in log

    state = sim_spec.parent / ".provision" / "sim16"
    assert main(["quarantine", "sim09", "--reason", "fan failure, ticket 4711", "--spec", str(sim_spec),
                 "--json"]) == 0
    moved = json.loads(capsys.readouterr().out)
    assert moved["nodes"] == ["sim09"] and moved["to"] == "quarantined" and Path(moved["record"]).is_dir()
    assert main(["admit", "sim09", "--reason", "fan replaced", "--state-dir", str(state), "--json"]) == 0
    capsys.readouterr()

    assert main(["history", "sim09", "--spec", str(sim_spec), "--json"]) == 0
    story = json.loads(capsys.readouterr().out)
    assert story["state"] == "admitted"
    assert [(move["from"], move["to"], move["by"]) for move in story["moves"]] == [
        (None, "new", "pipeline"), ("new", "quarantined", "operator"), ("quarantined", "admitted", "operator")]
    assert story["moves"][1]["reason"] == "fan failure, ticket 4711" and story["moves"][1]["command"] == "quarantine"
    assert main(["history", "sim09", "--state-dir", str(state)]) == 0
    table = capsys.readouterr().out
    assert table.startswith("sim09: admitted (fan replaced)\n3 move(s)") and "operator" in table

    assert main(["runs", str(sim_spec), "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [run["command"] for run in runs] == ["admit", "quarantine", "apply"]
    assert all(run["status"] == "succeeded" and Path(run["record"]).is_dir() and run["user"] for run in runs)
    assert main(["history", "sim99", "--spec", str(sim_spec)]) == 2
