"""The collectives stage's judgements over launches recorded from the simulated cluster's real workers
(``tests/data/launches``, written by ``python -m tests.record_launches``): each fault named by the check its
catalog entry names, nobody else failed, the stage asking for exactly the launches it made when recorded — in
milliseconds, where the same scenarios end to end take a minute each. test_burnin_multinode keeps the stage's
end-to-end run with all of these faults at once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provision.burnin import collectives, records
from provision.spec import load_spec
from tests.launches import HERE, Replay, load, scenario_spec

#: Which check names the faulty node; a rank that exits or goes silent mid-collective is also behind in posted
#: calls, so the watchdog may name it first.
CAUGHT = {
    "healthy": set(), "rank_hang": {"watchdog"}, "rank_slow": {"outliers"}, "collective_corruption": {"correctness"},
    "collective_corruption_three": {"correctness"},
    "degraded_hca_port": {"rail_busbw"}, "worker_error_init": {"collectives"},
    "worker_error_exit": {"collectives", "watchdog"}, "worker_error_silent": {"collectives", "watchdog"},
}
SYSTEMIC = {"rail_slow_everywhere": "RailsSystemic"}
SCENARIOS = sorted(path.stem for path in HERE.glob("*.json"))


def test_every_scenario_is_recorded() -> None:
    assert set(SCENARIOS) == set(CAUGHT) | set(SYSTEMIC)


def _stage(name: str, tmp_path: Path) -> tuple[dict, Replay, object]:
    recording = load(name)
    loaded = load_spec(scenario_spec(tmp_path, recording["faults"], recording["hosts"]))
    replay = Replay(recording)
    try:
        outcome: object = {verdict.node: verdict for verdict in collectives.run_collectives_stage(
            loaded, loaded.nodes, tmp_path, port=23000, evidence_dir=tmp_path / "workers", launcher=replay)}
    except collectives.SYSTEMIC as stopped:
        outcome = stopped
    return recording, replay, outcome


@pytest.mark.parametrize("name", sorted(CAUGHT))
def test_each_fault_is_named_by_its_check_and_nobody_else_fails(name: str, tmp_path: Path) -> None:
    recording, replay, verdicts = _stage(name, tmp_path)
    assert isinstance(verdicts, dict), verdicts
    faulty = {fault["node"] for fault in recording["faults"]}
    for node, verdict in verdicts.items():
        if node in faulty:
            assert not verdict.passed and verdict.check in CAUGHT[name], (node, verdict.check, verdict.reason)
        else:
            assert verdict.passed, (node, verdict.reason)
        assert (verdict.passed, verdict.check) == (recording["verdicts"][node]["passed"],
                                                   recording["verdicts"][node]["check"])
    assert not any(replay.pending.values()), "the stage made fewer launches than when it was recorded"


@pytest.mark.parametrize("name", sorted(SYSTEMIC))
def test_a_fault_on_every_node_stops_the_stage_as_systemic(name: str, tmp_path: Path) -> None:
    recording, _, stopped = _stage(name, tmp_path)
    assert type(stopped).__name__ == SYSTEMIC[name] and recording["systemic"].startswith(SYSTEMIC[name])
    assert "rail 1 (mlx5_3, GPU 1) slow in every pair of nodes" in str(stopped)
    assert "no node was quarantined for it" in str(stopped)
    report = json.loads((tmp_path / "workers" / "collectives.json").read_text())
    assert report[-1]["rail_pairing"]["systemic"] is True and report[-1]["rail_pairing"]["confirmed"] == {}


def _without(entry: dict, lost: str) -> dict:
    """A recorded launch less the node it lost, the others' ranks renumbered: their same timeouts, now at the same
    call with nobody behind them: a launch that failed on every node (what a rail too slow for the timeout, or a
    fabric gone, looks like)."""
    runs = []
    for new_rank, run in enumerate(run for run in entry["runs"] if run["node"] != lost):
        shift = (run["node_rank"] - new_rank) * entry["nproc"]
        records = [{**record, "rank": record["rank"] - shift} if "rank" in record else record
                   for record in run["records"]]
        runs.append({**run, "node_rank": new_rank, "records": records})
    return {**entry, "nodes": [run["node"] for run in runs], "runs": runs}


def test_a_stop_as_systemic_keeps_the_nodes_already_failed_on_their_own(tmp_path: Path) -> None:
    """Attempt 1 names the hung rank's node; attempt 2 fails on every node (the stage stops as systemic). The stop
    quarantines nobody, and the hung node's own finding is kept for the phase to quarantine."""
    recording = load("rank_hang")
    first = recording["launches"][0]
    recording = {**recording, "launches": [first, _without(first, "sim02")]}
    loaded = load_spec(scenario_spec(tmp_path, recording["faults"], recording["hosts"]))
    replay = Replay(recording)
    with pytest.raises(records.FailedEverywhere) as stopped:
        collectives.run_collectives_stage(loaded, loaded.nodes, tmp_path, port=23000,
                                        evidence_dir=tmp_path / "workers", launcher=replay)
    assert "failed on every node (3 of 3) in attempt 2" in str(stopped.value)
    (hung,) = stopped.value.established
    assert (hung.node, hung.passed, hung.check) == ("sim02", False, "watchdog"), hung.reason
    assert "rank 3 (sim02, GPU 1) stopped inside a collective" in hung.reason
    assert not any(replay.pending.values())


def test_a_node_left_alone_once_the_hung_node_is_removed_waits_and_is_not_failed(tmp_path: Path) -> None:
    """Two nodes, one hung: once the hung node is failed on its own (behind everyone), its partner is alone and
    nobody can measure it: it waits for partners (issue 55); it used to be quarantined, 'never completed'."""
    recording = load("rank_hang")
    first = _without(_without(recording["launches"][0], "sim04"), "sim03")
    recording = {**recording, "launches": [first]}
    loaded = load_spec(scenario_spec(tmp_path, recording["faults"], "sim[01-02]"))
    replay = Replay(recording)
    verdicts = {verdict.node: verdict for verdict in collectives.run_collectives_stage(
        loaded, loaded.nodes, tmp_path, port=23000, evidence_dir=tmp_path / "workers", launcher=replay)}
    assert (verdicts["sim02"].failed, verdicts["sim02"].check) == (True, "watchdog"), verdicts["sim02"].reason
    alone = verdicts["sim01"]
    assert not alone.passed and not alone.failed and "the only node left" in alone.waiting, alone.as_dict()
    assert not any(replay.pending.values())


def test_two_nodes_whose_wrong_sums_cannot_be_split_both_wait(tmp_path: Path, monkeypatch) -> None:
    """Two nodes, wrong sums, and group testing with nobody healthy to test either beside (each passes alone):
    neither is failed on the other's sums, and two nodes do not stop the burn-in as systemic."""
    from provision.burnin.isolation import Isolation

    recording = load("collective_corruption")
    corrupting = recording["faults"][0]["node"]
    other = next(node for node in recording["launches"][0]["nodes"] if node != corrupting)
    first = recording["launches"][0]
    for node in list(first["nodes"]):
        if node not in (corrupting, other):
            first = _without(first, node)
    recording = {**recording, "launches": [first]}
    pair = sorted([corrupting, other])
    loaded = load_spec(scenario_spec(tmp_path, recording["faults"], ",".join(pair)))
    searched: list[list[str]] = []

    def isolation(loaded, state_dir, nodes, nproc, **kwargs) -> Isolation:
        searched.append([node.name for node in nodes])
        return Isolation(untestable=[node.name for node in nodes], launches=2, rounds=1)

    monkeypatch.setattr(collectives, "isolate_wrong_results", isolation)
    verdicts = {verdict.node: verdict for verdict in collectives.run_collectives_stage(
        loaded, loaded.nodes, tmp_path, port=23000, evidence_dir=tmp_path / "workers", launcher=Replay(recording))}
    assert searched == [pair]
    for node in pair:
        assert not verdicts[node].passed and not verdicts[node].failed, verdicts[node].as_dict()
        assert "could not split" in verdicts[node].waiting
