"""What the command modules share, called directly: where state lives, the read-only store a reading command
opens, the status table and the lines that say a sink has not caught up; an operator's move shown as a line or as
JSON. (The commands end to end, as a user runs them, are tests/cli/test_cli.py's and the packages' own.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provision.cli import common, operator, render
from provision.errors import UsageProblem
from provision.fleet.operator import move_nodes
from provision.state import NodeState, StateStore
from tests.conftest import EXAMPLES
from tests.stores import recorded_run

pytestmark = pytest.mark.fast


@pytest.fixture
def state(tmp_path: Path) -> Path:
    with StateStore(tmp_path / "state") as store:
        store.register([("sim01", "h100"), ("sim02", "h100"), ("sim03", "h100")], "r0")
        run = recorded_run(store, "apply")
        store.transition("sim01", NodeState.PROVISIONED, run_id=run)
        store.transition("sim01", NodeState.BURNING_IN, run_id=run, stage="preflight")
        store.transition("sim01", NodeState.QUARANTINED, run_id=run, stage="preflight", reason="xid: Xid 79",
                         evidence={"check": "xid"})
        store.set_sink_status("slurm", pending=True, detail={"error": "slurmctld unreachable"}, run_id=run)
    return tmp_path / "state"


def test_state_lives_beside_the_spec_or_where_the_option_says(tmp_path: Path) -> None:
    loaded, directory = common.spec_or_state_dir(EXAMPLES / "sim-cluster.yaml", None)
    assert loaded is not None and directory == EXAMPLES / ".provision" / "sim16"
    assert common.spec_or_state_dir(None, tmp_path) == (None, tmp_path)
    with pytest.raises(UsageProblem, match="run `provision apply` first"):
        common.existing_store(tmp_path / "nothing-yet")


def test_status_names_the_quarantined_and_a_sink_that_has_not_caught_up(state: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with common.existing_store(state) as store:
        render.print_status("sim16", store)
        assert render.quarantine_check(store, "sim01") == "xid" and render.quarantine_check(store, "sim02") is None
    shown = capsys.readouterr().out
    assert "sim16: 3 nodes" in shown and "xid: Xid 79" in shown
    assert "slurm sync pending since" in shown and "slurmctld unreachable" in shown


def test_an_operators_move_is_shown_as_a_line_or_as_json(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    move = move_nodes(state, NodeState.DRAINED, "sim[02-03]", "rack work", argv=["drain", "sim[02-03]"])
    assert operator._show(move, state, False, "drained sim[02-03]") == 0
    assert "drained sim[02-03]" in capsys.readouterr().out
    assert operator._show(move, state, True, "") == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["nodes"], shown["to"], shown["reason"]) == (["sim02", "sim03"], "drained", "rack work")
    assert shown["sinks"]["slurm"]["pending"] is True


def test_status_lists_the_components_forecast_to_fail_as_warnings(state: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from provision.state.store import ForecastRecord

    with StateStore(state) as store:
        store.record_forecasts("watch", [
            ForecastRecord("sim02", "leaf01/7 SymbolErrorCounter", 24.0, 15.8, 9.6, 30.2, 16.2, 259.0, 1000.0, True,
                           "16.18/h, 4.0x the earlier 12 h: 741 events to go"),
            ForecastRecord("sim03", "leaf01/8 SymbolErrorCounter", 24.0, None, None, None, 9.0, 216.0, 1000.0,
                           False, "no trend")], run_id=None)
        render.print_status("sim16", store)
    shown = capsys.readouterr().out
    assert "forecast to fail (a warning: no node is drained for it)" in shown
    assert "leaf01/7 SymbolErrorCounter" in shown and "16 h (10-30 h)" in shown
    assert "leaf01/8" not in shown  # no trend: nothing to warn of
    assert render.forecast_span({"hours": None, "low": None, "high": None}) == "no trend"
