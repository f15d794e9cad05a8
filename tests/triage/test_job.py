"""``provision triage --job``'s own parts (issue 54): the job's window over its nodes' kernel logs, what could not
be gathered said rather than taken for health, the line that says whether to requeue, and the drain through the
lifecycle (stage ``job``, the job's id and the evidence in the node's history; a node not admitted left as it is).
The gathering on simulated hosts is here; the end to end run through a real Slurm is
tests/triage/test_job_slurm.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provision.facts.slurm import parse_jobs
from provision.fleet.operator import drain_for_job
from provision.state import NodeState, StateStore
from provision.state.lifecycle import JOB_STAGE, MOVES, TRIAGE
from provision.triage.job import in_window, window
from provision.triage.verdict import Culprit, Triage
from tests.stores import recorded_run

pytestmark = pytest.mark.fast

HERE = Path(__file__).parent.parent / "facts"


def _case(fact: str, name: str) -> dict:
    return json.loads((HERE / fact / f"{name}.json").read_text())


def test_the_window_is_the_jobs_start_and_end_in_local_time_widened() -> None:
    (job,) = parse_jobs(_case("slurm_jobs", "failed_exit_2")["output"])
    span = window(job)
    assert span is not None
    start, end = span
    assert start.tzinfo is not None and (end - start).total_seconds() == 2 * 120  # a 0 s job, 2 min each side


def test_only_the_kernel_lines_inside_the_window_are_kept() -> None:
    text = _case("kernel_log_iso", "xid79_mid_job")["output"]
    from datetime import datetime

    span = (datetime.fromisoformat("2026-11-28T17:50:00+00:00"), datetime.fromisoformat("2026-11-28T18:00:00+00:00"))
    kept, unplaced = in_window(text, span)
    assert unplaced == 0 and kept.splitlines() == text.splitlines()[2:]  # the boot's lines are before the job
    assert "79, pid=48211" in kept
    before = (datetime.fromisoformat("2026-11-28T16:00:00+00:00"), datetime.fromisoformat("2026-11-28T16:10:00+00:00"))
    assert in_window(text, before) == ("", 0)


def test_a_records_further_lines_follow_it_and_a_line_without_a_time_is_kept() -> None:
    from datetime import datetime

    text = _case("kernel_log_iso", "gpu_fell_off_multiline")["output"] + "a line with no time\n"
    span = (datetime.fromisoformat("2026-11-20T09:14:04+00:00"), datetime.fromisoformat("2026-11-20T09:15:00+00:00"))
    kept, unplaced = in_window(text, span)
    assert unplaced == 1 and kept.splitlines()[1].strip().startswith("NVRM: (PCI ID: 10de:2330)")
    assert "firmware version" not in kept and kept.endswith("a line with no time\n")


def test_only_the_triage_may_quarantine_for_a_job_and_only_an_admitted_node() -> None:
    assert {source for (source, target), commands in MOVES.items() if TRIAGE in commands} == {"admitted"}
    assert all(target is NodeState.QUARANTINED for (_, target), commands in MOVES.items() if TRIAGE in commands)


def test_a_drain_for_a_job_quarantines_the_admitted_and_leaves_the_rest(tmp_path: Path) -> None:
    with StateStore(tmp_path) as store:
        store.register([("sim01", "g"), ("sim02", "g"), ("sim03", "g")], recorded_run(store, "apply"))
        burnin = recorded_run(store, "burnin")
        for name in ("sim01", "sim02", "sim03"):
            store.transition(name, NodeState.PROVISIONED, run_id=recorded_run(store, "apply"))
            store.transition(name, NodeState.BURNING_IN, run_id=burnin, stage="preflight")
        store.transition("sim01", NodeState.ADMITTED, run_id=burnin)
        store.transition("sim02", NodeState.ADMITTED, run_id=burnin)
        store.transition("sim03", NodeState.QUARANTINED, run_id=burnin, stage="preflight", reason="xid")
    evidence = tmp_path / "gathered"
    evidence.mkdir()
    (evidence / "sim01.kernel.log").write_text("Xid 79\n")
    done = drain_for_job(tmp_path, "42", {"sim01": ["Xid 79 on GPU 0000:18:00"], "sim03": ["Xid 79"],
                                          "gpu99": ["named in the logs"]}, argv=["triage"], evidence=evidence)
    assert done.drained == ["sim01"]
    assert set(done.left) == {"sim03", "gpu99"} and "not admitted" in done.left["sim03"]
    assert (done.record / "evidence" / "sim01.kernel.log").read_text() == "Xid 79\n"
    with StateStore(tmp_path) as store:
        record = store.node("sim01")
        assert record is not None and (record.state, record.stage) == (NodeState.QUARANTINED, JOB_STAGE)
        assert record.reason == "job 42: Xid 79 on GPU 0000:18:00" and not record.by_operator
        assert store.history("sim01")[-1]["evidence"] == {"job": "42", "triage": ["Xid 79 on GPU 0000:18:00"]}
        sim02 = store.node("sim02")
        assert sim02 is not None and sim02.state is NodeState.ADMITTED


def test_the_requeue_line_says_what_to_do() -> None:
    from provision.cli.triage import requeue_line
    from provision.fleet.operator import JobDrain

    def triage(culprits: list[Culprit], links: list[str] = ()) -> Triage:  # type: ignore[assignment]
        return Triage(culprits, list(links), [], 1, 1, 10, [])

    strong = triage([Culprit("sim01", "strong", ["Xid 79"])])
    assert requeue_line(strong, None) == "Requeue from the last checkpoint: drain sim01 first (--drain)"
    drained = JobDrain(["sim01"], {}, "run-1", Path("."))
    assert requeue_line(strong, drained) == "Requeue from the last checkpoint: sim01 out of service"
    assert "excluding sim02" in requeue_line(triage([Culprit("sim02", "likely", ["late"])]), None)
    assert "no node is to blame" in requeue_line(triage([], ["sim01 <-> sim02"]), None)
    assert requeue_line(triage([]), None).startswith("Do not requeue blindly")


@pytest.mark.slow  # simulated hosts: built, and read through their stand-ins
def test_a_jobs_nodes_kernel_logs_over_its_window_name_the_node_that_lost_a_gpu(tmp_path: Path) -> None:
    """gather on simulated hosts, as ``triage --job`` runs it once Slurm has said which nodes and when: each node's
    kernel log read as root over SSH's stand-in (the boot's lines, an hour old, left out), the job's output copied,
    a node the spec does not know said to be missing; sim02's Xid 79, logged during the job, blames it."""
    from datetime import datetime, timedelta

    from provision.facts.slurm import SlurmJob
    from provision.hosts.remote import open_session
    from provision.sim.cluster import node_paths
    from provision.sim.host import inject_now
    from provision.spec import load_spec
    from provision.triage.job import addresses_of, gather
    from provision.triage.verdict import triage_directory
    from tests.simhelpers import bring_up

    state, _ = bring_up(tmp_path, [], hosts="sim[01-02]")
    loaded = load_spec(tmp_path / "spec.yaml")
    inject_now(node_paths(state, "sim02").root.parent, "xid", "gpu1", {"code": 79})
    output = tmp_path / "job-7.out"
    output.write_text("0: step 100 loss 0.4012\n1: RuntimeError: CUDA error: unspecified launch failure\n")
    now = datetime.now()
    job = SlurmJob("7", "train", "failed", "NonZeroExitCode", 1, 0, "batch", ("sim01", "sim02", "gpu99"), 0,
                   (now - timedelta(minutes=6)).isoformat(timespec="seconds"),
                   (now - timedelta(minutes=5)).isoformat(timespec="seconds"),
                   (now + timedelta(seconds=5)).isoformat(timespec="seconds"), str(output), str(output))
    folder = tmp_path / "gathered"
    evidence = gather(loaded, job, folder, lambda node: open_session(loaded, node, state))
    assert evidence.missing == ["gpu99: not in the spec, its kernel log not read"], evidence
    assert sorted(path.name for path in folder.iterdir()) == ["job-7.out", "sim01.kernel.log", "sim02.kernel.log"]
    assert "Linux version" not in (folder / "sim01.kernel.log").read_text()  # before the job: left out
    assert "79," in (folder / "sim02.kernel.log").read_text()
    result = triage_directory(folder, addresses_of(loaded))
    assert {culprit.who for culprit in result.culprits if culprit.strength == "strong"} == {"sim02"}, result
