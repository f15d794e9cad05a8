"""The watch's circuit breaker against a real slurmctld (issue 56, item 6): a bad driver rollout reaches half of
four admitted nodes at once (their GPUs time out on the GSP, Xid 119, the remedy a reset), so node-check, run by
the watch's revalidation jobs, is CRITICAL on both and drains them. The breaker's limit is one node in the window
(a quarter of the fleet): the pass that reads both drains back trips it. The watch quarantines neither, resets
nothing, lists both as held, and `status` says the fleet is systemic; an operator clears it."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
import yaml

from provision.run.context import SpecIdentity, mutating_run
from provision.sim.cluster import node_paths
from provision.sim.host import inject_now
from provision.spec import load_spec
from provision.state import NodeState, StateStore
from provision.watch.passes import one_pass
from provision.watch.revalidate import FAILED, PASSED
from tests import slurmcluster
from tests.conftest import run_cli
from tests.simhelpers import provision_then_burn_in, shrink_to_four_gpus, write_spec
from tests.watch.test_revalidation_slurm import PARTITIONS, _ended

HOSTS = ["sim01", "sim02", "sim03", "sim04"]
ROLLED_OUT = ["sim01", "sim02"]
HOUR = 3600.0


@pytest.mark.skipif(not slurmcluster.available(), reason=slurmcluster.MISSING)
def test_a_rollout_that_fails_half_the_fleet_trips_the_breaker_and_nobody_is_quarantined(tmp_path: Path) -> None:
    slurm_dir = tmp_path / "slurm"
    spec = shrink_to_four_gpus(write_spec(tmp_path, [], hosts="sim[01-04]", stages=["preflight"]))
    data = yaml.safe_load(spec.read_text())
    data["slurm"] = {"conf": str(slurm_dir / "slurm.conf")}
    data["watch"] = {
        "revalidate": {"every": "1h", "partition": "revalidate", "per_pass": 4, "time_limit_minutes": 5,
                       "command": f'{sys.executable} -m provision sim shell {spec} "$SLURMD_NODENAME" -- env '
                                  f"SLURM_CONF={slurm_dir / 'slurm.conf'} {sys.executable} -m provision node-check "
                                  "--drain"},
        "breaker": {"share": 0.25, "min_nodes": 1, "window_minutes": 60}}
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    state = tmp_path / ".provision" / "sim16"
    extra = "PreemptType=preempt/partition_prio\nPreemptMode=CANCEL"
    with slurmcluster.running(slurm_dir, HOSTS, extra=extra, partitions=PARTITIONS) as cluster:
        burned = provision_then_burn_in(spec)
        assert {row["state"] for row in burned["nodes"].values()} == {"admitted"}, burned["nodes"]
        cluster.wait(lambda: cluster.scontrol("-o", "show", "node").stdout.count("State=IDLE ") == len(HOSTS),
                     "every node plainly idle", timeout_s=60)
        for host in ROLLED_OUT:  # the rollout: every GPU of the node times out on the GSP after the new driver
            for gpu in range(4):
                inject_now(node_paths(state, host).root.parent, "xid", f"gpu{gpu}", {"code": 119})
        loaded = load_spec(spec)
        identity = SpecIdentity(spec.resolve(), loaded.sha256)
        later = time.time() + 2 * HOUR
        with mutating_run(state, "watch", ["watch"], spec=identity) as run:
            first = one_pass(loaded, run, state, now=later)
        assert first.revalidation is not None and sorted(first.revalidation.submitted) == HOSTS, first.revalidation
        _ended(cluster, list(first.revalidation.submitted.values()))
        with mutating_run(state, "watch", ["watch"], spec=identity) as run:
            second = one_pass(loaded, run, state, now=later + 60)
        drained = cluster.sinfo_reasons()
        status = json.loads(run_cli("status", "--json", str(spec)).stdout)
        shown = run_cli("status", str(spec)).stdout
        with mutating_run(state, "watch", ["watch"], spec=identity) as run:  # still tripped: nothing done
            third = one_pass(loaded, run, state, now=later + 120)
        cleared = run_cli("watch", str(spec), "--clear-breaker", "--json")
    assert second.revalidation is not None
    assert {end.node: end.verdict for end in second.revalidation.ended} == {
        "sim01": FAILED, "sim02": FAILED, "sim03": PASSED, "sim04": PASSED}
    # node-check drained the two itself; the watch quarantined neither: their drain is listed as held
    assert sorted(drained) == ROLLED_OUT and all("node-check" in reason for reason in drained.values()), drained
    assert "past 1" in second.reconciled.breaker, second.reconciled.breaker
    assert sorted(move.node for move in second.reconciled.held) == ROLLED_OUT, second.reconciled.held
    assert second.climbed == [] and third.climbed == [], "no reset, no power cycle while it holds"
    with StateStore(state) as store:
        assert {host: store.node(host).state for host in HOSTS} == dict.fromkeys(HOSTS, NodeState.ADMITTED)  # type: ignore[union-attr]
        assert [row["to_state"] for row in store.history("sim01")][-1] == "admitted"
    assert status["watch_breaker"]["tripped"] is True
    assert "systemic: the watch's breaker tripped" in shown and "holds 2 quarantine(s) (sim[01-02])" in shown, shown
    assert "sim01 is admitted here but stays drained in slurm by node-check: provision node-check: sim01: xid: " \
        "Xid 119" in shown, shown
    assert cleared.returncode == 0 and sorted(json.loads(cleared.stdout)["held"][i]["node"] for i in range(2)) == \
        ROLLED_OUT, cleared.stdout
