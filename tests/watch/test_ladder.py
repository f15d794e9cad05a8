"""The repair ladder (issue 56, item 5): the next rung from the attempts of the node's episode alone, graded by
the failed check's class; RMA past the ladder or past the policy's repeat count; an interrupted step re-validated,
never repeated; the attempts kept in the store per episode; and the lifecycle's moves that let the watch
re-validate only the nodes it quarantined."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from provision.spec.model import WatchLadder
from provision.state import NodeState
from provision.state.lifecycle import TransitionError
from provision.watch.ladder import FAILED, STARTED, Attempt, check_class, next_action
from tests.stores import recorded_run
from tests.watch.test_reconcile import _store

pytestmark = pytest.mark.fast
POLICY = WatchLadder()


def test_each_check_climbs_its_class_ladder_to_rma() -> None:
    assert (check_class("xid"), check_class("ib_ports"), check_class("swap")) == ("gpu", "network", "host")
    attempts: list[Attempt] = []
    seen = []
    for _ in range(6):
        action = next_action(POLICY, "xid", attempts, quarantines_in_window=1)
        seen.append((action.kind, action.step))
        if action.kind == "rma":
            break
        attempts.append(Attempt(action.step, FAILED, 0.0))
    assert seen == [("step", "gpu_reset"), ("step", "power_cycle"), ("step", "reburnin"), ("rma", "rma")]
    assert "after gpu_reset, power_cycle, reburnin" in next_action(POLICY, "xid", attempts,
                                                                     quarantines_in_window=1).why
    network = next_action(POLICY, "ib_ports", [], quarantines_in_window=1)
    assert (network.kind, network.step) == ("step", "revalidate")
    short = WatchLadder(host=["revalidate"])
    past = next_action(short, "swap", [Attempt("revalidate", FAILED, 0.0)], quarantines_in_window=1)
    assert past.kind == "rma" and "every step of the host ladder failed" in past.why


def test_a_node_quarantined_too_often_goes_to_rma_at_once() -> None:
    action = next_action(POLICY, "xid", [], quarantines_in_window=3)
    assert action.kind == "rma" and "3 times within 30 days" in action.why


def test_an_interrupted_step_is_revalidated_not_repeated() -> None:
    """The watch was killed after recording a power cycle and before its re-validation ended: the next pass
    re-validates; a second power cycle of a node that may still be booting is not sent."""
    attempts = [Attempt("gpu_reset", FAILED, 0.0), Attempt("power_cycle", STARTED, 60.0)]
    action = next_action(POLICY, "xid", attempts, quarantines_in_window=1)
    assert (action.kind, action.step) == ("revalidate", "power_cycle") and "not repeated" in action.why


def test_a_ladder_that_cannot_end_or_repeats_is_refused() -> None:
    for steps, words in (([], "at least one step"), (["rma", "revalidate"], "rma ends the ladder"),
                         (["revalidate", "revalidate"], "a step twice")):
        with pytest.raises(ValidationError, match=words):
            WatchLadder(gpu=steps)


def test_attempts_are_kept_per_episode_and_only_the_watchs_quarantines_are_its_to_revalidate(tmp_path: Path) -> None:
    with _store(tmp_path, {"n1": NodeState.ADMITTED, "n2": NodeState.QUARANTINED}) as store:
        watch = recorded_run(store, "watch")
        assert store.watch_episode("n1") is None
        store.transition("n1", NodeState.QUARANTINED, run_id=watch, stage="node-check", reason="node-check/xid: 79")
        episode = store.watch_episode("n1")
        assert episode is not None and store.watch_quarantines_since("n1", "2000-01-01") == 1
        first = store.start_attempt("n1", episode, "gpu_reset", run_id=watch)
        assert store.attempts("n1", episode)[0]["outcome"] == "started"
        store.finish_attempt(first, "failed", {"revalidation": "xid again"})
        store.transition("n1", NodeState.BURNING_IN, run_id=watch, stage="revalidate")
        store.transition("n1", NodeState.ADMITTED, run_id=watch)
        assert [row["step"] for row in store.attempts("n1", episode)] == ["gpu_reset"]
        store.transition("n1", NodeState.QUARANTINED, run_id=watch, stage="node-check", reason="node-check/xid: 79")
        assert store.watch_episode("n1") != episode and store.attempts("n1", store.watch_episode("n1") or 0) == []
        assert store.watch_quarantines_since("n1", "2000-01-01") == 2
        with pytest.raises(TransitionError):  # the burn-in's quarantine is not the watch's to take back
            store.transition("n2", NodeState.BURNING_IN, run_id=watch, stage="revalidate")
        with pytest.raises(TransitionError, match="re-validation"):  # and its stage is the watch's alone
            store.transition("n1", NodeState.BURNING_IN, run_id=recorded_run(store, "burnin"), stage="revalidate")


def test_the_rma_bundle_holds_the_nodes_story_checks_dcgm_and_says_what_is_missing(tmp_path: Path) -> None:
    import json
    import tarfile

    from provision.watch.rma import write_bundle

    with _store(tmp_path, {"n1": NodeState.ADMITTED}) as store:
        burnin = store.history("n1")[-1]["run_id"]
        run_dir = store.state_dir / "runs" / burnin
        (run_dir / "dcgm").mkdir(parents=True)
        (run_dir / "burnin-node.json").write_text(json.dumps([
            {"node": "n1", "stage": "node", "passed": True, "results": [{"check": "matmul", "outcome": "ok"}]},
            {"node": "n2", "stage": "node", "passed": True, "results": []}]))
        (run_dir / "dcgm" / "n1.json").write_text(json.dumps({"DCGM GPU Diagnostic": {"test_categories": []}}))
        watch = recorded_run(store, "watch")
        store.transition("n1", NodeState.QUARANTINED, run_id=watch, stage="node-check", reason="node-check/xid: 79")
        episode = store.watch_episode("n1") or 0
        store.finish_attempt(store.start_attempt("n1", episode, "gpu_reset", run_id=watch), "failed",
                             {"revalidation": "xid: Xid 79 again"})
        bundle = write_bundle(store, "n1", tmp_path / "rma", cluster="sim16", why="every step of the gpu ladder "
                              "failed", bmc="the BMC serves no log service")
    with tarfile.open(bundle.path) as archive:
        names = archive.getnames()
        read = {name.split("/", 1)[1]: archive.extractfile(name).read().decode()  # type: ignore[union-attr]
                for name in names}
    assert {"README.txt", "history.json", "attempts.json", "checks.json", "soak.json", "bmc.json",
            f"dcgm/{burnin}.json"} == set(read)
    assert "every step of the gpu ladder failed" in read["README.txt"]
    assert [card["node"] for card in json.loads(read["checks.json"])] == ["n1"], "only the node's own cards"
    assert json.loads(read["attempts.json"])[str(episode)][0]["detail"]["revalidation"] == "xid: Xid 79 again"
    assert json.loads(read["bmc.json"]) == {"entries": [], "why": "the BMC serves no log service"}
    assert json.loads(read["soak.json"])["why"] == "the node was never soaked"
    assert json.loads(read["history.json"])[-1]["stage"] == "node-check"


class _Scripted:
    """The hosts' side of the ladder as a script of what each step and re-validation found: these tests are of
    the climb's bookkeeping (attempts, moves, resumption, RMA), not of the hosts (``HostSteps`` runs the real
    steps: ``nvidia-smi -r`` through the node's session, the BMC's power cycle, the preflight checks)."""

    def __init__(self, revalidations: list[bool]) -> None:
        self.revalidations = revalidations
        self.done: list[tuple[str, str]] = []

    def perform(self, node, step):  # type: ignore[no-untyped-def]
        self.done.append((node.name, step))
        return True, f"{step} done"

    def revalidate(self, node):  # type: ignore[no-untyped-def]
        from provision.checks.outcome import CheckResult, Outcome

        ok = self.revalidations.pop(0)
        return [CheckResult("xid", Outcome.OK if ok else Outcome.FAILED, "no Xid" if ok else "Xid 79 again")]

    def bmc_log(self, node):  # type: ignore[no-untyped-def]
        return "not served"


def _climb_spec(tmp_path: Path) -> Path:
    from tests.simhelpers import write_spec

    return write_spec(tmp_path, [], hosts="sim[01-04]")


def _pass(spec: Path, state: Path, steps: _Scripted):  # type: ignore[no-untyped-def]
    from provision.run.context import SpecIdentity, mutating_run
    from provision.spec import load_spec
    from provision.watch.climb import climb

    loaded = load_spec(spec)
    with mutating_run(state, "watch", ["watch"], spec=SpecIdentity(spec, loaded.sha256)) as run:
        return [item.as_dict() for item in climb(loaded, run, now=time.time(), steps=steps)]


def test_a_node_climbs_rung_by_rung_and_returns_on_its_own_checks(tmp_path: Path) -> None:
    spec = _climb_spec(tmp_path)
    state = tmp_path / "state"
    with _store(tmp_path, {f"sim0{index}": NodeState.ADMITTED for index in range(1, 5)}) as store:
        store.transition("sim01", NodeState.QUARANTINED, run_id=recorded_run(store, "watch"), stage="node-check",
                         reason="node-check/xid: Xid 79 on GPU 0000:18:00")
    steps = _Scripted([False, True])
    first = _pass(spec, state, steps)
    assert [(row["node"], row["step"], row["outcome"]) for row in first] == [("sim01", "gpu_reset", "held")]
    second = _pass(spec, state, steps)
    assert [(row["node"], row["step"], row["outcome"]) for row in second] == [("sim01", "power_cycle", "returned")]
    assert steps.done == [("sim01", "gpu_reset"), ("sim01", "power_cycle")]
    assert _pass(spec, state, steps) == [], "returned: nothing more to climb"
    from provision.state import StateStore

    with StateStore(state) as store:
        moves = [(row["to_state"], row["stage"]) for row in store.history("sim01")][-5:]
        assert moves == [("quarantined", "node-check"), ("burning-in", "revalidate"), ("quarantined", "revalidate"),
                         ("burning-in", "revalidate"), ("admitted", None)]
        episode = store.watch_episode("sim01") or 0
        assert [(row["step"], row["outcome"]) for row in store.attempts("sim01", episode)] == [
            ("gpu_reset", "failed"), ("power_cycle", "passed")]


def test_a_pass_stopped_mid_step_resumes_with_the_revalidation_and_the_ladder_ends_in_rma(tmp_path: Path) -> None:
    spec = _climb_spec(tmp_path)
    state = tmp_path / "state"
    with _store(tmp_path, {f"sim0{index}": NodeState.ADMITTED for index in range(1, 5)}) as store:
        watch = recorded_run(store, "watch")
        store.transition("sim02", NodeState.QUARANTINED, run_id=watch, stage="node-check",
                         reason="node-check/xid: Xid 79 on GPU 0000:18:00")
        episode = store.watch_episode("sim02") or 0
        store.start_attempt("sim02", episode, "gpu_reset", run_id=watch)  # the pass was killed here: reset sent
    steps = _Scripted([False, False])
    resumed = _pass(spec, state, steps)
    assert [(row["action"], row["step"], row["outcome"]) for row in resumed] == [("revalidate", "gpu_reset", "held")]
    assert steps.done == [], "the reset was not sent again"
    assert [(row["step"], row["outcome"]) for row in _pass(spec, state, steps)] == [("power_cycle", "held")]
    assert [(row["step"], row["outcome"]) for row in _pass(spec, state, steps)] == [
        ("reburnin", "handed to the burn-in")]
    from provision.state import StateStore

    with StateStore(state) as store:
        assert store.node("sim02").state is NodeState.PROVISIONED  # type: ignore[union-attr]
        # the burn-in admits it again; the watch quarantines it twice more within the window (an operator admitting
        # it between): the third time it goes to RMA at once, its ladder not climbed again
        store.transition("sim02", NodeState.BURNING_IN, run_id=recorded_run(store, "burnin"), stage="node")
        store.transition("sim02", NodeState.ADMITTED, run_id=recorded_run(store, "burnin"))
        store.transition("sim02", NodeState.QUARANTINED, run_id=recorded_run(store, "watch"), stage="node-check",
                         reason="node-check/xid: Xid 79 on GPU 0000:18:00")
        store.transition("sim02", NodeState.ADMITTED, run_id=recorded_run(store, "admit"))
        store.transition("sim02", NodeState.QUARANTINED, run_id=recorded_run(store, "watch"), stage="node-check",
                         reason="node-check/xid: Xid 79 on GPU 0000:18:00")
    [sent] = _pass(spec, state, steps)
    assert (sent["step"], sent["outcome"]) == ("rma", "rma") and "3 times within 30 days" in sent["why"]
    assert Path(sent["detail"]["bundle"]).is_file()
    with StateStore(state) as store:
        record = store.node("sim02")
        assert record is not None and (record.state, record.stage) == (NodeState.QUARANTINED, "rma")
    assert _pass(spec, state, steps) == [], "RMA is held until provision return: the watch leaves it"


@pytest.mark.slow  # scontrol is asked (and finds no controller): a process, and seconds
def test_a_tripped_breaker_holds_the_ladder(tmp_path: Path) -> None:
    """A cause common to many nodes (a driver rollout) tripped the breaker: the nodes already quarantined are not
    reset, power-cycled or sent to RMA while it holds."""
    import yaml

    from provision.run.context import SpecIdentity, mutating_run
    from provision.spec import load_spec
    from provision.watch.passes import one_pass

    spec = _climb_spec(tmp_path)
    data = yaml.safe_load(spec.read_text())
    (tmp_path / "slurm.conf").write_text("ClusterName=test\n")  # no controller: Slurm unreadable, a problem
    data["slurm"] = {"conf": str(tmp_path / "slurm.conf")}
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    state = tmp_path / "state"
    with _store(tmp_path, {f"sim0{index}": NodeState.ADMITTED for index in range(1, 5)}) as store:
        watch = recorded_run(store, "watch")
        store.transition("sim01", NodeState.QUARANTINED, run_id=watch, stage="node-check",
                         reason="node-check/xid: Xid 79 on GPU 0000:18:00")
        store.set_breaker(tripped=True, detail={"why": "a driver rollout", "held": []}, run_id=watch)
    steps = _Scripted([True])
    loaded = load_spec(spec)
    with mutating_run(state, "watch", ["watch"], spec=SpecIdentity(spec, loaded.sha256)) as run:
        result = one_pass(loaded, run, state, now=time.time(), steps=steps)
    assert result.climbed == [] and steps.done == [] and result.ladder_held == "breaker tripped: a driver rollout"
