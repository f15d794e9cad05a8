"""The revalidation of idle nodes (issue 56, item 4), its pure part: which nodes are due, and what each way a job
can end says of its node, read from ``scontrol -o show job`` as this machine's slurmctld printed it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provision.facts.slurm import parse_jobs
from provision.watch.revalidate import ERROR, FAILED, LOST, PASSED, PREEMPTED, RUNNING, due, read_ends

pytestmark = pytest.mark.fast
CASES = Path(__file__).parents[1] / "facts" / "slurm_jobs"


def _jobs(case: str):  # type: ignore[no-untyped-def]
    return parse_jobs(json.loads((CASES / f"{case}.json").read_text())["output"])


def test_each_end_of_a_job_is_a_verdict_only_when_its_checks_ran_to_the_end() -> None:
    ends = read_ends(_jobs("revalidations_and_a_user_job"), {"1": "sim01", "2": "sim02", "7": "sim03"})
    assert [(end.node, end.verdict, end.judged) for end in ends] == [
        ("sim01", PREEMPTED, False), ("sim02", ERROR, False), ("sim03", LOST, False)]
    assert "a user's job took the node" in ends[0].detail
    assert ends[1].detail.startswith("exit 3: UNKNOWN"), "node-check's unknown is no verdict on the node"
    [failed] = read_ends(_jobs("failed_exit_2"), {"3": "sim02"})
    assert (failed.verdict, failed.judged, failed.detail) == (FAILED, True, "exit 2: CRITICAL: a check failed")
    assert "unknown" in ends[2].detail, "a job slurmctld forgot is never taken as passed"
    [passed] = read_ends(_jobs("completed"), {"2": "sim02"})
    assert (passed.verdict, passed.judged) == (PASSED, True)
    [running] = read_ends(_jobs("running"), {"1": "sim01"})
    assert running.verdict == RUNNING and not running.ended
    [requeued] = read_ends(_jobs("requeued_by_a_user_job"), {"1": "sim01"})
    assert requeued.verdict == RUNNING, "requeued: pending again, its checks not run yet"
    [foreign] = read_ends(_jobs("revalidations_and_a_user_job"), {"3": "sim01"})
    assert foreign.verdict == ERROR and "not this node's revalidation" in foreign.detail
    assert read_ends(_jobs("no_jobs"), {"4": "sim02"})[0].verdict == LOST


def test_the_idle_nodes_waiting_longest_are_due_within_the_passs_share() -> None:
    day = 86400.0
    now = 10 * day
    last = {"a": now - 8 * day, "b": now - 9 * day, "c": now - 1 * day, "e": now - 8 * day}
    chosen = due(["a", "b", "c", "d", "e"], last, idle={"a", "b", "c", "d"}, underway=set(), now=now, every_s=7 * day,
                 limit=2)
    assert chosen == ["d", "b"], "never re-validated first, then the longest ago; e is busy with a user's job"
    assert due(["a", "b"], last, idle={"a", "b"}, underway={"b"}, now=now, every_s=7 * day, limit=5) == ["a"]
    assert due(["c"], last, idle={"c"}, underway=set(), now=now, every_s=7 * day, limit=5) == []


def test_over_a_week_of_hourly_passes_every_node_is_revalidated_daily_within_the_passs_share() -> None:
    """The schedule over a simulated week (issue 56's week, its revalidation line): 64 admitted nodes, a pass an
    hour taking at most 4, each node due a day after its last revalidation, each busy with a user's job in a
    third of the passes (seeded), a job ending before the next pass. Every node is revalidated every day of the
    week, never twice within its period, never more than the pass's share at once. The fleet admitted at once is
    due at once: the first round takes the queue's 16 passes to drain (a node's first revalidation by 40 h); the
    longest-waiting-first order staggers the fleet after it, so no later gap exceeds its period by more than 6 h
    (29 h measured with this seed)."""
    import itertools
    import random

    hour, day = 3600.0, 86400.0
    nodes = [f"n{index:02d}" for index in range(64)]
    rng = random.Random(56)
    last: dict[str, float] = {node: 0.0 for node in nodes}  # all admitted at the week's start
    done: dict[str, list[float]] = {node: [] for node in nodes}
    for step in range(1, 7 * 24 + 1):
        now = step * hour
        idle = {node for node in nodes if rng.random() >= 1 / 3}
        chosen = due(nodes, last, idle=idle, underway=set(), now=now, every_s=day, limit=4)
        assert len(chosen) <= 4 and set(chosen) <= idle
        for node in chosen:
            assert now - last[node] >= day, (node, now, last[node])
            last[node] = now
            done[node].append(now)
    for node, times in done.items():
        assert len(times) >= 6, (node, times)  # the first is due after a day: six or more in seven days
        assert times[0] <= day + 16 * hour, (node, times)
        gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
        assert max(gaps) <= day + 6 * hour, (node, gaps)


def test_the_store_keeps_each_revalidation_until_its_end_is_read(tmp_path: Path) -> None:
    from provision.state import NodeState, StateStore
    from provision.watch.revalidate import PASSED, PREEMPTED
    from provision.watch.revalidation import job_argv
    from tests.stores import recorded_run

    with StateStore(tmp_path) as store:
        store.register([("sim01", "g"), ("sim02", "g")], recorded_run(store, "apply"))
        watch = recorded_run(store, "watch")
        store.add_revalidation("sim01", "11", at=100.0, run_id=watch)
        store.add_revalidation("sim02", "12", at=100.0, run_id=watch)
        assert store.revalidations_underway() == {"11": "sim01", "12": "sim02"}
        store.end_revalidation("11", PASSED, "completed, exit 0", at=160.0)
        store.end_revalidation("12", PREEMPTED, "preempted", at=130.0)
        assert store.revalidations_underway() == {}
        assert store.last_revalidated() == {"sim01": 100.0}, "only a pass makes a node known good"
        assert store.node("sim01") is not None and store.node("sim01").state is NodeState.NEW  # type: ignore[union-attr]
    argv = job_argv("revalidate", "sim01", 30, "/usr/local/sbin/provision-node-check --drain")
    assert argv[:2] == ["sbatch", "--parsable"] and argv[argv.index("-w") + 1] == "sim01"
    assert argv[argv.index("-J") + 1] == "provision-revalidate-sim01" and argv[-2:] == [
        "--wrap", "/usr/local/sbin/provision-node-check --drain"]
