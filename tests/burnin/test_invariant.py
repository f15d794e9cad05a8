"""A node passes only on its own measurements: every stage that starts workers, driven through workers that
error at init, exit without a result, or report nothing — one node's, and every node's.

The judgements are replayed over recorded launches (what the agents print, as records) in milliseconds; the
end-to-end tests run the same faults through the simulated cluster's real workers (``worker_error``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from provision.burnin import collectives, node_stage, pairs, records, training
from provision.burnin.launch import LaunchResult, NodeRun
from provision.spec import load_spec
from provision.spec.faults import CATALOG
from tests.simhelpers import provision_then_burn_in, shrink_to_four_gpus, write_spec

NCCL_INIT = ("DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled "
             "system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5")
STORE_TIMEOUT = "DistStoreError: wait timeout after 10000ms, keys: /default_pg/0//cuda//0"
PEER_GONE = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer"
# what gloo raises in the rank that waited its whole timeout (seen on this machine: one rank late loading the
# checkpoint, session 31's healthy bench)
SEND_TIMEOUT = "RuntimeError: Timed out waiting 10000ms for send operation to complete"


def _agent(nproc: int, exits: int = 0) -> dict[str, Any]:
    return {"type": "agent", "workers": {str(local): {"exit": exits, "killed": False} for local in range(nproc)}}


def _measured(run_rank: int, nproc: int, params: dict[str, Any], nodes: int) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for local in range(nproc):
        rank = run_rank * nproc + local
        scopes = ["all"] + ([f"rail{local}"] if nodes > 1 and nproc > 1 else [])
        for scope in scopes:
            for op in params["ops"]:
                for nbytes in params["sizes"]:
                    records.append({"type": "measurement", "rank": rank, "scope": scope, "op": op, "bytes": nbytes,
                                    "ranks": nodes * nproc if scope == "all" else nodes, "time_us": 100.0,
                                    "correct": True})
        records.append({"type": "result", "rank": rank, "local_rank": local, "device": "cpu",
                        "measurements": len(scopes) * len(params["ops"]) * len(params["sizes"]), "outside_s": 1.0})
    return records


def _errors(run_rank: int, nproc: int, message: str) -> list[dict[str, Any]]:
    return [{"type": "error", "rank": run_rank * nproc + local, "local_rank": local, "error": message}
            for local in range(nproc)]


Behaviour = dict[str, str]  # node -> "ok" | "init" | "timeout" | "silent" | "short"


RecordsFor = Callable[[str, int, int, dict[str, Any], int], list[dict[str, Any]]]


def _replayed(behaviours: list[Behaviour], launched: list[list[str]], records_for: RecordsFor):
    """A launcher replaying one behaviour per launch (the last one repeats): what each node's agent said, as
    ``records_for(kind, node rank, nproc, params, nodes)`` writes it."""
    def launch(loaded, state_dir, nodes, *, test, nproc, params, deadline_s, port):
        launched.append([node.name for node in nodes])
        behaviour = behaviours[min(len(launched), len(behaviours)) - 1]
        runs = [NodeRun(node.name, index, records=records_for(behaviour.get(node.name, "ok"), index, nproc, params,
                                                              len(nodes))) for index, node in enumerate(nodes)]
        return LaunchResult(test, runs, nproc)
    return launch


def _collective_records(kind: str, index: int, nproc: int, params: dict[str, Any], nodes: int) -> list[dict]:
    if kind == "ok":
        return [*_measured(index, nproc, params, nodes), _agent(nproc)]
    if kind in ("init", "timeout", "peer"):
        message = {"init": NCCL_INIT, "timeout": STORE_TIMEOUT, "peer": PEER_GONE}[kind]
        return [*_errors(index, nproc, message), _agent(nproc, 1)]
    if kind == "silent":  # the agent reports, its workers' records never arrived
        return [_agent(nproc)]
    # "short": every rank finished but measured only the first operation
    return [*[record for record in _measured(index, nproc, params, nodes)
              if record["type"] != "measurement" or record["op"] == params["ops"][0]], _agent(nproc)]


def _fake_launch(behaviours: list[Behaviour], launched: list[list[str]]):
    return _replayed(behaviours, launched, _collective_records)


@pytest.fixture
def loaded(tmp_path: Path):
    return load_spec(write_spec(tmp_path, [], hosts="sim[01-04]"))


def _collectives(loaded, tmp_path: Path, monkeypatch, behaviours: list[Behaviour]) -> tuple[dict, list]:
    launched: list[list[str]] = []
    monkeypatch.setattr(collectives, "judge_slow_rails", lambda *args, **kwargs: {})
    verdicts = collectives.run_collectives_stage(loaded, loaded.nodes, tmp_path, port=20000,
                                               evidence_dir=tmp_path / "workers",
                                               launcher=_fake_launch(behaviours, launched))
    return {verdict.node: verdict for verdict in verdicts}, launched


@pytest.mark.fast
@pytest.mark.parametrize("kind", ["init", "timeout", "silent", "short"])
def test_collectives_that_failed_on_every_node_stop_as_systemic(loaded, tmp_path: Path, monkeypatch,
                                                                 kind: str) -> None:
    with pytest.raises(records.FailedEverywhere, match="failed on every node"):
        _collectives(loaded, tmp_path, monkeypatch, [dict.fromkeys(("sim01", "sim02", "sim03", "sim04"), kind)])


@pytest.mark.fast
def test_one_node_failing_at_init_is_failed_and_its_victims_run_again(loaded, tmp_path: Path, monkeypatch) -> None:
    """sim03 raised at init; the others timed out waiting for it at the rendezvous: only sim03 is the cause."""
    verdicts, launched = _collectives(loaded, tmp_path, monkeypatch, [
        {"sim01": "timeout", "sim02": "peer", "sim03": "init", "sim04": "timeout"}, {}])
    assert launched == [["sim01", "sim02", "sim03", "sim04"], ["sim01", "sim02", "sim04"]]
    assert not verdicts["sim03"].passed and verdicts["sim03"].check == "collectives"
    assert "unhandled system error" in verdicts["sim03"].reason
    assert all(verdicts[host].passed for host in ("sim01", "sim02", "sim04"))


@pytest.mark.fast
@pytest.mark.parametrize("kind", ["silent", "short"])
def test_a_node_with_missing_measurements_fails_on_its_own(loaded, tmp_path: Path, monkeypatch, kind: str) -> None:
    verdicts, _ = _collectives(loaded, tmp_path, monkeypatch, [{"sim02": kind}, {}])
    assert not verdicts["sim02"].passed and verdicts["sim02"].check == "collectives", verdicts["sim02"].reason
    assert ("gave no result" if kind == "silent" else "4 of 16 measurements") in verdicts["sim02"].reason
    assert all(verdicts[host].passed for host in ("sim01", "sim03", "sim04"))


@pytest.mark.fast
def test_nobody_passes_collectives_that_measured_nothing(loaded, tmp_path: Path, monkeypatch) -> None:
    """Only timeouts everywhere, and no culprit: not a pass for anyone."""
    with pytest.raises(records.FailedEverywhere):
        _collectives(loaded, tmp_path, monkeypatch, [dict.fromkeys(("sim01", "sim02", "sim03", "sim04"),
                                                                   "timeout")])


def _training_records(index: int, nproc: int) -> list[dict[str, Any]]:
    steps = [0.1] * 12
    return [{"type": "result", "local_rank": local, "device": "cpu", "ddp_losses": [2.0, 1.0],
             "fsdp_losses": [2.0, 1.0], "ddp_step_s": steps, "fsdp_step_s": steps, "tail_digest": "t",
             "shard_digest": "s", "tail_losses": [1.0]} for local in range(nproc)]


def _training_records_for(kind: str, index: int, nproc: int, params: dict[str, Any], nodes: int) -> list[dict]:
    records = {"ok": _training_records(index, nproc), "init": _errors(index, nproc, NCCL_INIT),
               "peer": _errors(index, nproc, PEER_GONE), "silent": [],
               "timeout": [{**record, "where": ["fabric_tests/training.py:150 in _checkpoint"]}
                           for record in _errors(index, nproc, SEND_TIMEOUT)]}[kind]
    return [*records, _agent(nproc, int(kind != "ok"))]


def _training(loaded, tmp_path: Path, monkeypatch, behaviours: list[Behaviour]) -> tuple[dict, list]:
    launched: list[list[str]] = []
    verdicts = training.run_training_stage(loaded, loaded.nodes, tmp_path, seed=1, port=20000, run_id="r1",
                                           evidence_dir=tmp_path / "workers",
                                           launcher=_replayed(behaviours, launched, _training_records_for))
    return {verdict.node: verdict for verdict in verdicts}, launched


@pytest.mark.fast
def test_training_blames_the_node_that_failed_not_its_victims(loaded, tmp_path: Path, monkeypatch) -> None:
    verdicts, launched = _training(loaded, tmp_path, monkeypatch, [
        {"sim01": "peer", "sim02": "silent", "sim03": "peer", "sim04": "peer"}, {}])
    assert launched[0] == ["sim01", "sim02", "sim03", "sim04"] and launched[1] == ["sim01", "sim03", "sim04"]
    assert not verdicts["sim02"].passed and verdicts["sim02"].check == "training"
    assert all(verdicts[host].passed for host in ("sim01", "sim03", "sim04"))


@pytest.mark.fast
@pytest.mark.parametrize("kind", ["init", "silent"])
def test_training_that_failed_on_every_node_stops_as_systemic(loaded, tmp_path: Path, monkeypatch,
                                                              kind: str) -> None:
    with pytest.raises(records.FailedEverywhere, match="training failed on every node"):
        _training(loaded, tmp_path, monkeypatch, [dict.fromkeys(("sim01", "sim02", "sim03", "sim04"), kind)])


@pytest.mark.fast
@pytest.mark.parametrize("failing", [0, 1], ids=["train", "resume"])
def test_training_that_failed_everywhere_once_runs_every_node_again(loaded, tmp_path: Path, monkeypatch,
                                                                     failing: int) -> None:
    """A failure everywhere in either launch is ours the first time: the attempt runs again with every node, and
    the nodes pass on the second attempt's measurements; the first attempt's logs stay as evidence."""
    everyone = ("sim01", "sim02", "sim03", "sim04")
    behaviours = [{}] * failing + [dict.fromkeys(everyone, "peer"), {}, {}]
    verdicts, launched = _training(loaded, tmp_path, monkeypatch, behaviours)
    assert launched == [list(everyone)] * (failing + 3)
    assert all(verdicts[host].passed for host in everyone), {host: v.reason for host, v in verdicts.items()}
    assert (tmp_path / "workers" / f"training-attempt1-{('train', 'resume')[failing]}").is_dir()
    assert (tmp_path / "workers" / "training-attempt2-resume").is_dir()


@pytest.mark.fast
def test_a_failure_everywhere_names_the_rank_that_timed_out_and_keeps_every_error(loaded, tmp_path: Path,
                                                                                  monkeypatch) -> None:
    """sim04 timed out waiting, the others saw it go: the stop names sim04 first (sorted by name it would be
    fourth of four, the last shown), and each node's errors with the frames they were raised in are evidence."""
    behaviour = {"sim01": "peer", "sim02": "peer", "sim03": "peer", "sim04": "timeout"}
    with pytest.raises(records.FailedEverywhere) as stopped:
        _training(loaded, tmp_path, monkeypatch, [behaviour])
    assert str(stopped.value).split(": ", 2)[:2] == ["the training failed on every node (4 of 4) in the train "
                                                     "launch of attempt 2", "sim04"], str(stopped.value)
    assert "Timed out waiting 10000ms" in str(stopped.value)
    kept = json.loads((tmp_path / "workers" / "training-attempt2-train" / "training-sim04.errors.json").read_text())
    assert kept[0]["where"] == ["fabric_tests/training.py:150 in _checkpoint"] and len(kept) == 2


@pytest.mark.fast
def test_the_training_waits_on_its_peers_at_least_the_default_collective_timeout(loaded) -> None:
    """The example's 10 s collective timeout bounds a collective; a training rank waits on checkpoint I/O too."""
    assert training.training_params(loaded, seed=1, phase="train", checkpoint_dir="/c")["timeout_s"] == 60.0
    assert training.training_wait(120.0) == 120.0 and training.training_wait(10.0) == 60.0


@pytest.mark.fast
@pytest.mark.parametrize("kind", ["init", "silent"])
def test_the_node_stage_fails_a_node_whose_workers_gave_nothing(kind: str) -> None:
    records = _errors(0, 4, NCCL_INIT) if kind == "init" else []
    run = NodeRun("sim01", 0, records=[*records, _agent(4, int(kind == "init"))])
    checks = node_stage.judge_node(run, 4, {})
    assert [check.outcome.value for check in checks] == ["failed"], checks


@pytest.mark.fast
def test_pairs_never_passes_a_node_on_another_hcas_figures() -> None:
    """sim02's mlx5_3 timed out in every test it was in: its mlx5_0's figures do not pass the node."""
    hcas = ["sim02/mlx5_0", "sim02/mlx5_3"]
    good = pairs.Measurement("sim02/mlx5_0", "sim03/mlx5_0", 800.0, "sweep 1", gbps=780.0)
    lost = pairs.Measurement("sim02/mlx5_3", "sim03/mlx5_3", 800.0, "sweep 1", error="timed out")
    assert pairs._healthy("sim02", hcas, [good, lost], []).outcome.value == "unknown"
    assert "mlx5_3" in pairs._healthy("sim02", hcas, [good, lost], []).message
    assert pairs._healthy("sim02", hcas, [lost], []).outcome.value == "unknown"
    both = pairs.Measurement("sim02/mlx5_3", "sim04/mlx5_3", 800.0, "sweep 2", gbps=790.0)
    assert pairs._healthy("sim02", hcas, [good, lost, both], []).outcome.value == "ok"


# -- end to end: the same faults in the simulated cluster's real workers ---------------------------------------

ONE_NODE_EACH = [  # the collectives' cases (init, exit, silent) replay recorded launches (test_collectives_replayed),
    # the training's replay the same records above; end to end, the node stage's workers fail here
    {"kind": "worker_error", "node": "sim02", "params": {"when": "init", "test": "node"}},
    {"kind": "worker_error", "node": "sim03", "params": {"when": "exit", "test": "node"}},
]
CAUGHT = {"sim02": ("node", "node_test"), "sim03": ("node", "node_test")}


def _spec(directory: Path, faults: list[dict], hosts: str, stages: list[str]) -> Path:
    return shrink_to_four_gpus(write_spec(directory, faults, hosts=hosts, stages=stages,
                                          admission={"max_failure_percent": {"burnin": 100}}),
                               checkpoint_dir=str(directory / "checkpoints"))


@pytest.mark.slow
def test_workers_that_failed_keep_their_node_out_and_nobody_else(tmp_path: Path) -> None:
    burned = provision_then_burn_in(_spec(tmp_path, ONE_NODE_EACH, "sim[01-04]", ["preflight", "node"]))
    nodes = burned["nodes"]
    for host, (stage, check) in CAUGHT.items():
        assert nodes[host]["state"] == "quarantined", nodes
        assert (nodes[host]["stage"], nodes[host]["check"]) == (stage, check), nodes
    assert "unhandled system error" in nodes["sim02"]["reason"]
    assert "GPUs [0] gave no result" in nodes["sim03"]["reason"] or "GPU 1:" in nodes["sim03"]["reason"]
    assert nodes["sim01"]["state"] == nodes["sim04"]["state"] == "admitted", nodes


@pytest.mark.slow
def test_collectives_that_failed_everywhere_admit_nobody(tmp_path: Path) -> None:
    faults = [{"kind": "worker_error", "node": host, "params": {"when": "init", "test": "collectives"}}
              for host in ("sim01", "sim02")]
    burned = provision_then_burn_in(_spec(tmp_path, faults, "sim[01-02]", ["preflight", "collectives"]))
    assert burned["rc"] != 0
    assert {row["state"] for row in burned["nodes"].values()} == {"burning-in"}, burned["nodes"]
    assert "the collectives failed on every node" in str(burned["payload"])


def test_a_stage_stopped_as_systemic_still_quarantines_the_nodes_it_had_failed(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The collectives named sim02's hung rank in one attempt and then failed on every node in the next (how the
    stage reaches that: test_collectives_replayed). The stop quarantines nobody for itself; sim02 is quarantined for
    what it showed, the others stay where they were, to be burned in again."""
    from provision.burnin import phase
    from provision.burnin.verdict import judge
    from provision.checks.outcome import CheckResult, Outcome

    def stopped_after_naming_sim02(context: Any, nodes: list[Any]) -> list[Any]:
        hung = judge(context.loaded.spec.admission, "sim02", "collectives", [CheckResult(
            "watchdog", Outcome.FAILED, "rank 3 (sim02, GPU 1) stopped inside a collective; the others waited for "
            "it until the 10 s timeout", "read the stack dump")])
        raise phase.StageStopped("the collectives failed on every node (3 of 3) in attempt 2: sim01: GPU 1: "
                                 "RuntimeError: Operation timed out!", [hung])

    monkeypatch.setitem(phase.STAGES, "collectives", stopped_after_naming_sim02)
    burned = provision_then_burn_in(_spec(tmp_path, [], "sim[01-04]", ["preflight", "collectives"]))
    assert burned["rc"] != 0
    assert {name: row["state"] for name, row in burned["nodes"].items()} == {
        "sim01": "burning-in", "sim02": "quarantined", "sim03": "burning-in", "sim04": "burning-in"}
    assert "stopped inside a collective" in burned["nodes"]["sim02"]["reason"]
    assert "before it stopped are quarantined: sim02 (watchdog)" in str(burned["payload"])


def test_the_catalog_says_where_worker_errors_are_caught() -> None:
    assert (CATALOG["worker_error"].stage, CATALOG["worker_error"].check) == ("collectives", "collectives")


@pytest.mark.fast
def test_a_perftest_without_cuda_fails_its_node_with_the_reason(tmp_path: Path) -> None:
    """GPUDirect on, ib_write_bw refuses --use_cuda (built without CUDA): the node fails pairs/perftest saying so,
    never passes on host-memory figures."""
    from provision.network.sources import design_fabric
    from topology import routes

    loaded = load_spec(write_spec(tmp_path, [], hosts="sim[01-02]"))
    refused = pairs.Measurement("sim02/mlx5_0", "sim01/mlx5_0", 800.0, "sweep 1",
                                error="sim02/mlx5_0 (client): ib_write_bw: unrecognized option '--use_cuda=0'",
                                at_fault="sim02")
    report = pairs._verdicts(loaded, loaded.nodes, [refused], [], routes.Router(design_fabric(loaded)),
                             {"sim01": ["sim01/mlx5_0"], "sim02": ["sim02/mlx5_0"]})
    verdicts = {verdict.node: verdict for verdict in report.verdicts}
    assert not verdicts["sim02"].passed and verdicts["sim02"].check == "perftest"
    assert "was built without CUDA" in verdicts["sim02"].reason
    assert not verdicts["sim01"].passed  # it measured nothing: unknown, never a pass


@pytest.mark.slow
def test_pair_tests_that_cannot_run_keep_their_node_out_and_nobody_else(tmp_path: Path) -> None:
    """GPUDirect on and sim02's perftest built without CUDA: sim02 fails pairs/perftest with the reason; sim01 and
    sim03 pass on the tests they measured with each other."""
    faults = [{"kind": "perftest_without_cuda", "node": "sim02"}]
    burned = provision_then_burn_in(_spec(tmp_path, faults, "sim[01-03]", ["preflight", "pairs"]))
    nodes = burned["nodes"]
    assert (nodes["sim02"]["state"], nodes["sim02"]["stage"], nodes["sim02"]["check"]) == (
        "quarantined", "pairs", "perftest"), nodes
    assert "was built without CUDA" in nodes["sim02"]["reason"]
    assert nodes["sim01"]["state"] == nodes["sim03"]["state"] == "admitted", nodes
