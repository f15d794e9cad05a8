"""The fleet's baseline: the judgement on recorded real H100 figures, the store, the file it travels in, and the
return of a node from repair, without a cluster (the campaigns themselves: tests/fleet/test_baseline_campaigns.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provision.checks import baseline
from provision.checks.outcome import Outcome
from provision.errors import UsageProblem
from provision.fleet import baselines, operator
from provision.spec import load_spec
from provision.state import NodeState, StateStore
from provision.state.store import BaselineSample
from tests.conftest import run_cli
from tests.simhelpers import write_spec
from tests.stores import recorded_run

DATA = Path(__file__).parents[1] / "data" / "gpu"
PROFILE = "hgx-h100"


def _records(name: str) -> list[dict]:
    return json.loads((DATA / f"{name}.json").read_text())["records"]


def _fleet(nodes: int = 8, scale: float = 1.0) -> list[dict[str, list[tuple[str, float]]]]:
    """Nodes measuring as the recorded healthy H100 node does (MAMF ~794 TFLOPS bf16, ~3.0 TB/s copy, ~369 GB/s
    ring busbw: tests/data/gpu/h100_healthy.json names its sources), each GPU shifted by a few tenths of a percent
    as healthy GPUs of a fleet differ."""
    fleet = []
    for index in range(nodes):
        records = [{**record, "tflops": record["tflops"] * scale * (1 + 0.002 * ((index + local) % 5 - 2)),
                    "memory_gbps": record["memory_gbps"] * scale}
                   for local, record in enumerate(_records("h100_healthy"))]
        fleet.append(baseline.node_figures(records))
    return fleet


def _baseline(fleet: list[dict[str, list[tuple[str, float]]]], campaign: str = "c1") -> baseline.Baseline:
    return baseline.Baseline.of(PROFILE, ((name, value, campaign) for node in fleet
                                          for name, items in node.items() for _item, value in items))


def test_a_node_slow_on_every_gpu_passes_its_node_mates_and_the_catalogue_but_not_the_baseline() -> None:
    """All eight GPUs at 93% (a power cap, a BIOS setting on one node): node-mates agree, 738 TFLOPS clears the
    catalogue's floor, and only the fleet's history says it is slow."""
    from provision.checks import node_stage
    from tests.checks.test_gpu_judgements import limits_for

    slow = [{**record, "tflops": record["tflops"] * 0.93} for record in _records("h100_healthy")]
    checks = {result.check: result.outcome for result in node_stage.judge_node_records(
        slow, 8, limits_for("H100-SXM-80GB"))}
    assert checks["matmul"] is Outcome.OK
    result = baseline.judge_node_figures(baseline.node_figures(slow), _baseline(_fleet()), margin=0.05,
                                         min_samples=32, on_gpu=True)
    assert result.outcome is Outcome.FAILED
    assert result.message.startswith("GPU 0: matmul_tflops 740.4 TFLOPS against the baseline's median 794")
    assert "64 samples of campaign c1" in result.message
    healthy = baseline.judge_node_figures(_fleet(1)[0], _baseline(_fleet()), margin=0.05, min_samples=32,
                                          on_gpu=True)
    assert healthy.outcome is Outcome.OK, healthy


def test_on_cpu_workers_only_the_ratio_to_node_mates_is_judged() -> None:
    cpu = [{**record, "tflops": 0.084} for record in _records("h100_healthy")]
    cpu[2]["tflops"] = 0.084 * 0.92
    known = _baseline([baseline.node_figures([{**record, "tflops": 0.084 * (1 + 0.001 * local)}
                                              for local, record in enumerate(cpu)]) for _ in range(4)])
    result = baseline.judge_node_figures(baseline.node_figures(cpu), known, margin=0.05, min_samples=32,
                                         on_gpu=False)
    assert result.outcome is Outcome.FAILED and result.message.startswith("GPU 2: matmul_ratio 0.92")
    assert not [line for line in result.evidence if "memory_gbps" in line], "a CPU's absolute figures are not judged"


def test_too_few_samples_judge_nothing_and_say_so() -> None:
    result = baseline.judge_node_figures(_fleet(1)[0], _baseline(_fleet(2)), margin=0.05, min_samples=32,
                                         on_gpu=True)
    assert result.outcome is Outcome.SILENCED
    assert "no baseline yet for hgx-h100: matmul_ratio (16 of 32 samples)" in result.message
    nothing = baseline.judge_node_figures(_fleet(1)[0], None, margin=0.05, min_samples=32, on_gpu=True)
    assert nothing.outcome is Outcome.SILENCED and "0 of 32" in nothing.message


def test_a_baseline_that_scatters_widens_its_own_floor() -> None:
    """A baseline whose healthy GPUs spread ±6% cannot call a GPU 8% slow: its floor is four robust standard
    deviations down, not the 5% margin."""
    scattered = baseline.FigureBaseline("matmul_tflops", tuple(794 * (1 + 0.06 * ((index % 7) - 3) / 3)
                                                              for index in range(70)), ("c1",))
    assert scattered.floor(0.05) < 794 * 0.92 < 794 * 0.95
    tight = baseline.FigureBaseline("matmul_tflops", tuple(794 + (index % 3) for index in range(70)), ("c1",))
    assert tight.floor(0.05) == pytest.approx(795 * 0.95)
    slower_is_worse = baseline.FigureBaseline("step_s", (1.0,) * 40, ("c1",))
    assert slower_is_worse.floor(0.05) == pytest.approx(1.05)


def test_a_whole_delivery_below_the_baseline_is_systemic_and_one_slow_node_is_not() -> None:
    known = _baseline(_fleet())
    assert baseline.delivery_below(_fleet(8, scale=1.0), known, margin=0.05, min_samples=32, on_gpu=True) == []
    one_slow = _fleet(7) + _fleet(1, scale=0.9)
    assert baseline.delivery_below(one_slow, known, margin=0.05, min_samples=32, on_gpu=True) == []
    lines = baseline.delivery_below(_fleet(8, scale=0.9), known, margin=0.05, min_samples=32, on_gpu=True)
    assert [line.split(":")[0] for line in lines] == ["matmul_tflops", "memory_gbps"]
    assert "-10.0% from the baseline's" in lines[0]
    assert baseline.delivery_below(_fleet(8, scale=0.9), known, margin=0.05, min_samples=32, on_gpu=False) == []


# -- the store and the file ----------------------------------------------------------------------------------


def _samples(fleet: list[dict[str, list[tuple[str, float]]]], hardware: str, campaign: str) -> list[BaselineSample]:
    return [BaselineSample(PROFILE, hardware, name, campaign, f"n{index}", item, value)
            for index, node in enumerate(fleet) for name, items in node.items() for item, value in items]


def test_an_exported_baseline_imported_elsewhere_gives_the_same_verdicts(tmp_path: Path) -> None:
    loaded = load_spec(write_spec(tmp_path, []))
    hardware = baselines.hardware_of(loaded.spec.hardware[PROFILE], "gpu")
    here, there = tmp_path / "here", tmp_path / "there"
    with StateStore(here) as store:
        store.add_baseline(_samples(_fleet(), hardware, "c1") + _samples(_fleet(4, 1.01), hardware, "c2"),
                           source="measured here")
        # 12 nodes of 8 GPUs: three figures a GPU and one a node
        assert baselines.export(store, tmp_path / "baseline.json", cluster="site-a") == 12 * 25
    done = baselines.import_file(there, tmp_path / "baseline.json", argv=["baseline", "import"])
    assert (done.read, done.added) == (12 * 25, 12 * 25)
    again = baselines.import_file(there, tmp_path / "baseline.json", argv=["baseline", "import"])
    assert again.added == 0, "an import repeated adds nothing"
    candidates = [*_fleet(2), baseline.node_figures([{**record, "tflops": record["tflops"] * 0.93}
                                                     for record in _records("h100_healthy")])]
    verdicts = []
    for directory in (here, there):
        with StateStore(directory) as store:
            known = baselines.baseline_for(store, loaded, PROFILE, measured_on="gpu")
            assert baselines.baseline_for(store, loaded, PROFILE, measured_on="cpu") is None, "GPU figures only"
            verdicts.append([baseline.judge_node_figures(figures, known, margin=0.05, min_samples=32, on_gpu=True)
                             for figures in candidates])
            sources = {sample.source for sample in store.baseline_samples()}
    assert verdicts[0] == verdicts[1]
    assert [result.outcome for result in verdicts[1]] == [Outcome.OK, Outcome.OK, Outcome.FAILED]
    assert sources == {"imported from site-a (baseline.json)"}


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", "baseline.json:1:2: not JSON"),
    ('{"format": "something-else"}', "not a baseline file"),
    ('{"format": "provision-baseline", "version": 2, "samples": []}', "baseline format version 2; this provision "
                                                                       "reads 1 to 1"),
    ('{"format": "provision-baseline", "version": 1, "samples": [{"profile": "p"}]}',
     "samples[0].hardware: missing or not a str"),
    ('{"format": "provision-baseline", "version": 1, "samples": [{"profile": "p", "hardware": "h", "figure": '
     '"flops", "campaign": "c", "node": "n", "item": "GPU 0", "value": 1, "source": "", "at": ""}]}',
     "samples[0].figure: unknown figure 'flops'"),
])
def test_a_bad_baseline_file_is_refused_at_its_place_and_nothing_is_imported(tmp_path: Path, content: str,
                                                                             message: str) -> None:
    (tmp_path / "baseline.json").write_text(content)
    result = run_cli("baseline", "import", str(tmp_path / "baseline.json"), "--state-dir", str(tmp_path / "state"))
    assert result.returncode == 2 and message in result.stderr, result.stderr
    store = StateStore.open_readonly(tmp_path / "state")
    assert store is None or store.baseline_samples() == []


# -- a node back from repair -----------------------------------------------------------------------------------


def test_only_quarantined_nodes_return_and_all_or_none(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with StateStore(state) as store:
        store.register([("n1", "g"), ("n2", "g")], "r0")
        recorded_run(store, "apply", "r0")
        for name in ("n1", "n2"):
            store.transition(name, NodeState.PROVISIONED, run_id="r0")
            store.transition(name, NodeState.BURNING_IN, run_id="r0", stage="node")
        store.transition("n1", NodeState.QUARANTINED, run_id="r0", stage="node", reason="node/matmul: GPU 3 slow")
        store.transition("n2", NodeState.ADMITTED, run_id="r0")
    with pytest.raises(UsageProblem, match="n2 is admitted, not quarantined"):
        operator.return_nodes(state, "n[1-2]", "RMA", argv=["return"])
    with StateStore(state) as store:
        assert store.node("n1").state is NodeState.QUARANTINED, "a refused return moves nobody"
    move = operator.return_nodes(state, "n1", "RMA: GPU 3 replaced", argv=["return"])
    with StateStore(state) as store:
        record = store.node("n1")
        last = store.history("n1")[-1]
    assert move.nodes == ["n1"] and record.state is NodeState.PROVISIONED
    assert last["by_operator"] and last["reason"] == "RMA: GPU 3 replaced"
    assert last["evidence"]["quarantined_in"] == "node"
    assert last["evidence"]["quarantined_for"] == "node/matmul: GPU 3 slow"


def test_a_small_burn_in_borrows_admitted_partners_for_its_multi_node_stages(tmp_path: Path) -> None:
    from provision.burnin.phase import partners_for

    loaded = load_spec(write_spec(tmp_path, [], hosts="sim[01-06]"))
    with StateStore(tmp_path / "state") as store:
        store.register([(node.name, node.group) for node in loaded.nodes], "r0")
        moves = {state: recorded_run(store, command) for state, command in (
            (NodeState.ADMITTED, "admit"), (NodeState.QUARANTINED, "quarantine"), (NodeState.DRAINED, "drain"))}
        for name, target in (("sim01", NodeState.ADMITTED), ("sim02", NodeState.QUARANTINED),
                             ("sim03", NodeState.ADMITTED), ("sim04", NodeState.ADMITTED),
                             ("sim05", NodeState.ADMITTED), ("sim06", NodeState.DRAINED)):
            store.transition(name, target, run_id=moves[target], reason="test")
        returned = [node for node in loaded.nodes if node.name == "sim02"]
        names = [node.name for node in partners_for(store, loaded, returned, ["preflight", "node", "collectives"])]
        assert names == ["sim01", "sim03", "sim04"], "admitted nodes only, up to four nodes in all"
        assert partners_for(store, loaded, returned, ["preflight", "node"]) == [], "no multi-node stage"
        busy = partners_for(store, loaded, returned, ["pairs"], idle=lambda names: [n for n in names if n != "sim03"])
        assert [node.name for node in busy] == ["sim01", "sim04", "sim05"], "a node Slurm has busy is not borrowed"


def test_the_training_stage_keeps_each_gpus_median_step_for_the_baseline() -> None:
    from provision.burnin.launch import NodeRun
    from provision.burnin.training import step_figures

    run = NodeRun("n1", 0, records=[{"type": "result", "local_rank": local, "device": "cpu",
                                     "ddp_step_s": [0.1, 0.3, 0.2 + local / 100]} for local in (1, 0)])
    device, figures = step_figures(run)
    assert device == "cpu" and [(item, round(value, 6)) for item, value in figures["step_s"]] == [
        ("GPU 0", 0.2), ("GPU 1", 0.21)]
    assert baseline.figure_of("step_s").higher_is_better is False
