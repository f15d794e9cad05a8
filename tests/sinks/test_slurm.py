"""Admission reaches Slurm: a real slurmctld and one slurmd per simulated host on loopback (no mocked scontrol).

Quarantined and not-yet-admitted nodes are drained with reasons that start ``provision:``; an admitted node is
resumed only when the drain is ours; an administrator's drain stays; slurmctld down leaves the store updated and
the sync pending until the next run; the spec's topology.conf is accepted by slurmctld.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from provision.cli import main
from provision.facts.slurm import SlurmNode, parse_nodes
from provision.sinks.slurm import idle_in, idle_nodes, plan_sync, wanted_reason
from provision.spec import load_spec
from provision.state import NodeRecord, NodeState
from tests import slurmcluster
from tests.conftest import run_cli
from topology import hostlist

HOSTS = hostlist.expand("sim[01-16]")


def _record(name: str, state: NodeState, *, stage: str | None = None, reason: str = "",
            run_id: str | None = "R1") -> NodeRecord:
    return NodeRecord(name, "compute", state, stage, reason, True, 0, "2026-11-23T10:00:00+00:00", run_id)


def _slurm(name: str, state: str = "idle", flags: tuple[str, ...] = (), reason: str = "",
           features: tuple[str, ...] = ()) -> SlurmNode:
    return SlurmNode(name, state, frozenset(flags), reason, "root" if reason else "", features, features)


@pytest.mark.fast
def test_the_plan_drains_what_is_not_admitted_and_resumes_only_our_drains() -> None:
    quarantined = _record("a", NodeState.QUARANTINED, stage="node", reason="node/matmul: GPU 5 at 48%")
    records = [quarantined, _record("b", NodeState.ADMITTED), _record("c", NodeState.ADMITTED),
               _record("d", NodeState.ADMITTED), _record("e", NodeState.NEW, run_id=None)]
    slurm = {"a": _slurm("a"), "b": _slurm("b", flags=("drain",), reason=wanted_reason(quarantined)),
             "c": _slurm("c", flags=("drain",), reason="fan failure, ticket 4711"), "d": _slurm("d"),
             "e": _slurm("e")}
    plan = plan_sync(records, slurm)
    assert [(action.node, action.kind) for action in plan.actions] == [("a", "drain"), ("b", "resume"),
                                                                       ("e", "drain")]
    assert plan.actions[0].reason == "provision: node/matmul: GPU 5 at 48% (run R1)"
    assert plan.actions[2].reason == "provision: not admitted yet: new"
    assert plan.held_by_admin == {"c": "fan failure, ticket 4711"}
    # applied, the same plan again is empty: the sync is idempotent
    after = {"a": _slurm("a", flags=("drain",), reason=plan.actions[0].reason), "b": _slurm("b"),
             "c": slurm["c"], "d": _slurm("d"), "e": _slurm("e", flags=("drain",), reason=plan.actions[2].reason)}
    again = plan_sync(records, after)
    assert again.actions == [] and again.held_by_admin == {"c": "fan failure, ticket 4711"}


@pytest.mark.fast
def test_node_checks_drain_read_back_by_the_watch_becomes_ours() -> None:
    """The watch quarantined the node at node-check (issue 56): its drain is rewritten as ours, so a later
    re-admission by the watch's ladder resumes it (instead of leaving it for an administrator and reading it back
    again as a new failure). node-check's drain of a node the store still admits stays node-check's."""
    from provision.cli.render import NODE_CHECK_DRAIN as SHOWN
    from provision.node_check.on_node import DRAIN_PREFIX
    from provision.sinks.slurm import NODE_CHECK_DRAIN

    assert NODE_CHECK_DRAIN == DRAIN_PREFIX == SHOWN
    drain = "provision node-check: a: xid: Xid 79 on GPU 0000:18:00: GPU has fallen off the bus."
    read = _record("a", NodeState.QUARANTINED, stage="node-check", reason="node-check/xid: Xid 79", run_id="W1")
    # the same pass climbed c's ladder a rung (a GPU reset, its Xid still logged): held at stage revalidate
    climbed = _record("c", NodeState.QUARANTINED, stage="revalidate", reason="revalidate/xid: Xid 79", run_id="W1")
    plan = plan_sync([read, _record("b", NodeState.ADMITTED), climbed],
                     {"a": _slurm("a", flags=("drain",), reason=drain), "b": _slurm("b", flags=("drain",),
                                                                                   reason=drain.replace("a:", "b:")),
                      "c": _slurm("c", flags=("drain",), reason=drain.replace("a:", "c:"))})
    assert [(action.node, action.kind, action.reason) for action in plan.actions] == [
        ("a", "drain", "provision: node-check/xid: Xid 79 (run W1)"),
        ("c", "drain", "provision: revalidate/xid: Xid 79 (run W1)")]
    assert plan.held_by_admin == {"b": drain.replace("a:", "b:")}
    back = plan_sync([_record("a", NodeState.ADMITTED)], {"a": _slurm("a", flags=("drain",),
                                                                      reason=plan.actions[0].reason)})
    assert [(action.node, action.kind) for action in back.actions] == [("a", "resume")]


@pytest.mark.fast
def test_features_follow_the_store_and_foreign_features_stay() -> None:
    own = {"a": ("h100-sxm-80gb", "rails8"), "b": ("h100-sxm-80gb", "rails8")}
    managed = frozenset({"burnin_ok", "h100-sxm-80gb", "rails8"})
    records = [_record("a", NodeState.ADMITTED), _record("b", NodeState.QUARANTINED, stage="preflight",
                                                         reason="preflight/xid: Xid 79")]
    slurm = {"a": _slurm("a", features=("bigmem",)),
             "b": _slurm("b", flags=("drain",), reason=wanted_reason(records[1]),
                         features=("bigmem", "burnin_ok", "h100-sxm-80gb", "rails8"))}
    plan = plan_sync(records, slurm, own_features=own, managed=managed)
    assert [(action.node, action.kind, action.features) for action in plan.actions] == [
        ("a", "features", ("bigmem", "burnin_ok", "h100-sxm-80gb", "rails8")),
        ("b", "features", ("bigmem", "h100-sxm-80gb", "rails8"))]


@pytest.mark.fast
def test_a_long_reason_is_one_bounded_line() -> None:
    record = _record("a", NodeState.QUARANTINED, stage="collectives", reason="collectives/x: " + "word\n" * 200)
    reason = wanted_reason(record)
    assert len(reason) <= 240 and "\n" not in reason and reason.endswith("... (run R1)")


@pytest.mark.fast
def test_partners_are_idle_in_service_and_answering() -> None:
    listing = {"busy": _slurm("busy", state="allocated"), "held": _slurm("held", flags=("drain",), reason="fan"),
               "silent": _slurm("silent", flags=("not_responding",)), "down": _slurm("down", state="down"),
               "free": _slurm("free")}
    assert idle_in(listing, ["busy", "held", "silent", "down", "free", "unknown"]) == ["free"]


def _spec_with_slurm(sim_spec: Path, conf: Path) -> Path:
    spec = yaml.safe_load(sim_spec.read_text())
    spec["slurm"] = {"conf": str(conf)}
    sim_spec.write_text(yaml.safe_dump(spec, sort_keys=False))
    return sim_spec


@pytest.mark.skipif(not slurmcluster.available(), reason=slurmcluster.MISSING)
def test_admission_reaches_a_real_slurm(sim_spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topology = run_cli("topology", "slurm", str(sim_spec))
    assert topology.returncode == 0, topology.stderr
    with slurmcluster.running(tmp_path / "slurm", HOSTS, topology=topology.stdout) as cluster:
        shown = cluster.scontrol("show", "topology").stdout
        assert "SwitchName=su01" in shown and "Nodes=sim[01-04]" in shown and "SwitchName=fabric" in shown
        listing = cluster.scontrol("-o", "show", "node").stdout
        assert [node.name for node in parse_nodes(listing)] == HOSTS

        spec = _spec_with_slurm(sim_spec, cluster.conf)
        cluster.scontrol("update", "nodename=sim02", "state=drain", "reason=fan failure, ticket 4711")
        assert main(["apply", str(spec), "--phases", "simulate,register"]) == 0
        capsys.readouterr()
        reasons = cluster.sinfo_reasons()
        assert set(reasons) == set(HOSTS), "a node that is not admitted yet takes jobs"
        assert reasons["sim01"].startswith("provision: not admitted yet: new")
        assert reasons["sim02"] == "fan failure, ticket 4711"

        quarantined = {"sim07": "preflight/xid: Xid 79 on GPU 0000:4b:00", "sim09": "node/matmul: GPU 5 slow"}
        for node, reason in quarantined.items():
            assert main(["quarantine", node, "--reason", reason, "--spec", str(spec)]) == 0
        assert main(["admit", "sim[01-06,08,10-16]", "--reason", "burn-in passed", "--spec", str(spec)]) == 0
        said = capsys.readouterr().out
        assert "sim02 is admitted here but stays drained in slurm by an administrator: fan failure" in said
        reasons = cluster.sinfo_reasons()
        assert set(reasons) == {"sim02", "sim07", "sim09"}
        assert reasons["sim02"] == "fan failure, ticket 4711"
        for node, reason in quarantined.items():
            assert reasons[node].startswith(f"provision: quarantined by an operator: {reason} (run ")
        # the partners a node back from repair may borrow: idle and in service. The resume marks a node not
        # responding until its slurmd answers the ping the resume sends (a fraction of a second here, or longer):
        # once they answer, sim01 and sim08 may be borrowed, sim02 an administrator holds may not
        cluster.wait(lambda: not any("not_responding" in node.flags for node in parse_nodes(
            cluster.scontrol("-o", "show", "node").stdout)), "every resumed slurmd answered its ping")
        assert idle_nodes(load_spec(spec), ["sim01", "sim02", "sim08"]) == ["sim01", "sim08"]
        features = {node.name: node.available_features for node in parse_nodes(
            cluster.scontrol("-o", "show", "node").stdout)}
        assert features["sim01"] == ("burnin_ok", "h100-sxm-80gb", "rails8")
        assert features["sim07"] == ("h100-sxm-80gb", "rails8")

        assert main(["admit", "sim09", "--reason", "GPU replaced", "--spec", str(spec)]) == 0
        capsys.readouterr()
        assert set(cluster.sinfo_reasons()) == {"sim02", "sim07"}

        assert main(["slurm", "sync", str(spec), "--dry-run", "--json"]) == 0
        drift = json.loads(capsys.readouterr().out)
        assert drift["actions"] == [] and drift["held_by_admin"] == {"sim02": "fan failure, ticket 4711"}

        cluster.stop_controller()
        assert main(["quarantine", "sim10", "--reason", "link flaps", "--spec", str(spec), "--json"]) == 0
        moved = json.loads(capsys.readouterr().out)
        assert moved["nodes"] == ["sim10"] and moved["sinks"]["slurm"]["pending"] is True
        assert main(["status", str(spec)]) == 0
        assert "slurm sync pending since" in capsys.readouterr().out
        cluster.start_controller()
        assert main(["slurm", "sync", str(spec)]) == 0
        assert "did drain sim10: provision: quarantined by an operator: link flaps" in capsys.readouterr().out
        assert set(cluster.sinfo_reasons()) == {"sim02", "sim07", "sim10"}
        assert main(["status", str(spec)]) == 0
        assert "pending" not in capsys.readouterr().out


@pytest.mark.skipif(not slurmcluster.available(), reason=slurmcluster.MISSING)
def test_spec_nodes_slurm_does_not_know_are_a_located_error_and_nothing_changes(sim_spec: Path,
                                                                                  tmp_path: Path) -> None:
    with slurmcluster.running(tmp_path / "slurm", [*hostlist.expand("sim[01-14]"), "gpu01"]) as cluster:
        spec = _spec_with_slurm(sim_spec, cluster.conf)
        assert main(["apply", str(spec), "--phases", "simulate,register"]) == 0
        result = run_cli("slurm", "sync", str(spec))
        assert result.returncode == 2, result.stdout + result.stderr
        assert f"{spec}:" in result.stderr and "2 node(s) of the spec are not Slurm nodes: sim[15-16]" in result.stderr
        assert "Slurm has 1 node(s) the spec does not name: gpu01" in result.stderr
        assert cluster.sinfo_reasons() == {}, "something was changed in Slurm"


@pytest.mark.skipif(not slurmcluster.available(), reason=slurmcluster.MISSING)
def test_node_check_as_health_check_program_drains_a_node_after_an_xid(tmp_path: Path) -> None:
    """slurmd runs ``provision node-check --drain`` on each node every HealthCheckInterval; an Xid injected into an
    admitted, healthy node drains it with the check's reason within one interval, and nothing else is drained;
    ``provision watch --once`` then reads the drain back: the node is quarantined in the store with its check
    (issue 56), and the sync after the watch's run makes node-check's drain the store's (``provision: ...``)."""
    import sys
    import time

    from provision.sim import kernel_log
    from provision.sim.node import append_kernel_log
    from tests.simhelpers import provision, shrink_to_four_gpus, write_spec

    (tmp_path / "cluster").mkdir()
    spec = shrink_to_four_gpus(write_spec(tmp_path / "cluster", [], hosts="sim[01-02]", stages=["preflight"]))
    provision(spec)
    for host in ("sim01", "sim02"):
        checked = run_cli("sim", "shell", str(spec), host, "--", sys.executable, "-m", "provision", "node-check",
                          timeout=60)
        assert checked.returncode == 0 and checked.stdout.startswith(f"OK: {host}: "), checked.stdout + checked.stderr
    admitted = run_cli("admit", "sim[01-02]", "--reason", "burned in before this test", "--spec", str(spec))
    assert admitted.returncode == 0, admitted.stdout + admitted.stderr
    interval = 5
    program = tmp_path / "health-check.sh"
    slurm_dir = tmp_path / "slurm"
    program.write_text("#!/bin/sh\n# slurmd runs this as root with SLURMD_NODENAME set; on a real node it is just\n"
                       "# `provision node-check --drain` (scontrol finds /etc/slurm/slurm.conf); here it enters the\n"
                       "# simulated host first and names this test's slurm.conf.\n"
                       f'exec {sys.executable} -m provision sim shell {spec} "$SLURMD_NODENAME" -- '
                       f"env SLURM_CONF={slurm_dir / 'slurm.conf'} {sys.executable} -m provision node-check --drain\n")
    program.chmod(0o755)
    with slurmcluster.running(slurm_dir, ["sim01", "sim02"],
                              extra=f"HealthCheckProgram={program}\nHealthCheckInterval={interval}\n"
                                    "HealthCheckNodeState=ANY") as cluster:
        time.sleep(interval + 1)
        assert cluster.sinfo_reasons() == {}, "a healthy node was drained by its health check"
        root = spec.parent / ".provision" / "sim16" / "sim" / "nodes" / "sim02" / "root"
        injected = time.monotonic()
        append_kernel_log(root, kernel_log.xid_lines("0000:18:00.0", 79))
        cluster.wait(lambda: "sim02" in cluster.sinfo_reasons(), "the health check drains sim02",
                     timeout_s=interval * 2 + 10)
        took = time.monotonic() - injected
        reasons = cluster.sinfo_reasons()
        _spec_with_slurm(spec, slurm_dir / "slurm.conf")
        watched = run_cli("watch", str(spec), "--once", "--json", timeout=60)
        assert watched.returncode == 0, watched.stdout + watched.stderr
        moves = json.loads(watched.stdout)["moves"]
        assert [(move["node"], move["to"], move["stage"]) for move in moves] == [("sim02", "quarantined", "node-check")]
        assert moves[0]["reason"].startswith("node-check/xid: Xid 79"), moves
        again = json.loads(run_cli("watch", str(spec), "--once", "--json", timeout=60).stdout)
        assert again["moves"] == [], "read back once"
        # the store decides sim02 now: the sync after the watch's run made node-check's drain ours, so the ladder
        # can return the node (our sync resumes only our own drains)
        ours = cluster.sinfo_reasons()["sim02"]
        assert ours.startswith(("provision: node-check/xid: Xid 79", "provision: revalidate/xid: Xid 79")), ours
        # and it stays the store's: the health check, still CRITICAL on sim02 every interval, leaves a drained node
        # as it is (it wrote its own reason over ours, and over an administrator's, until stop 63's clean clone)
        time.sleep(interval * 2 + 1)
        assert cluster.sinfo_reasons()["sim02"] == ours, cluster.sinfo_reasons()
    status = {row["name"]: row for row in json.loads(run_cli("status", str(spec), "--json").stdout)["nodes"]}
    assert (status["sim02"]["state"], status["sim01"]["state"]) == ("quarantined", "admitted")
    assert set(reasons) == {"sim02"}
    assert reasons["sim02"].startswith("provision node-check: sim02: xid: Xid 79"), reasons
    assert took <= interval + 6, f"drained {took:.1f} s after the Xid (HealthCheckInterval {interval} s)"


@pytest.mark.fast
def test_srun_label_pieces_are_put_back_into_each_tasks_lines() -> None:
    """As srun 22.05 prints with --label (seen here: a 5000-byte line came back as 1027-byte labelled pieces)."""
    from provision.burnin.launch import srun_lines

    long_a, long_b, exact = "a" * 2500, "b" * 1500, "c" * 1024
    pieces = [(" 0", long_a[:1024]), ("11", long_b[:1024]), (" 0", long_a[1024:2048]), ("11", long_b[1024:]),
              (" 0", long_a[2048:]), (" 0", exact), (" 0", ""), ("11", "short")]
    text = "\n".join(f"{label}: {piece}" for label, piece in pieces) + "\nsrun: error: a message of srun's own\n"
    assert srun_lines(text) == {"0": f"{long_a}\n{exact}\n", "11": f"{long_b}\nshort\n"}
