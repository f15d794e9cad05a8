"""The revalidation of idle nodes through a real slurmctld, and a node's way back from node-check's drain (issue 56,
items 2, 4 and 5): two admitted simulated nodes with a BMC each (the Redfish emulators), the two partitions measured
in docs/watch.md (``batch`` over ``revalidate``, preempt/partition_prio, CANCEL). A pass two hours after admission
submits node-check to each; sim02's GPU fell off the bus meanwhile (Xid 79, a one-off a power cycle ends), so its
node-check is CRITICAL and drains it; the next pass reads both ends (sim01 passed, sim02 failed), reconcile
quarantines sim02 from its drain with node-check's check, and the GPU ladder's first rung, a reset, is refused by
the lost GPU; the pass after power-cycles it through its BMC, its own checks pass on the new boot, and it is
returned and resumed in Slurm, every step in its history and attempts.
(A preempted revalidation's end, no verdict, is read from this Slurm's recorded output in test_revalidate.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from provision.run.context import SpecIdentity, mutating_run
from provision.sim.cluster import node_paths
from provision.sim.host import inject_now
from provision.sim.node import load_state
from provision.sinks.slurm import client_for
from provision.spec import LoadedSpec, load_spec
from provision.state import NodeState, StateStore
from provision.watch.passes import one_pass
from provision.watch.revalidate import FAILED, PASSED, PREEMPTED, JobEnd, read_ends
from provision.watch.revalidation import job_argv, revalidation_pass
from tests import redfish, slurmcluster
from tests.conftest import ROOT, run_cli
from tests.simhelpers import provision_then_burn_in, shrink_to_four_gpus, write_spec

HOSTS = ["sim01", "sim02"]
PARTITIONS = ["PartitionName=batch Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=10",
              "PartitionName=revalidate Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=1"]
HOUR = 3600.0
BMC_PASSWORD = "sim-bmc-7730"


def _ended(cluster: slurmcluster.SlurmCluster, job_ids: list[str], limit_s: float = 180) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        listing = cluster.scontrol("-o", "show", "job").stdout
        states = {line.split()[0].split("=", 1)[1]: line.split("JobState=", 1)[1].split()[0]
                  for line in listing.splitlines() if line.startswith("JobId=")}
        if all(states.get(job) not in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING") for job in job_ids):
            return
        time.sleep(0.5)
    raise AssertionError(f"jobs {job_ids} did not end within {limit_s:g} s")


@pytest.mark.skipif(not slurmcluster.available(), reason=slurmcluster.MISSING)
@pytest.mark.skipif(redfish.available() is not None, reason=str(redfish.available()))
def test_idle_nodes_are_revalidated_and_a_critical_one_is_power_cycled_back_to_service(tmp_path: Path) -> None:
    slurm_dir = tmp_path / "slurm"
    spec = shrink_to_four_gpus(write_spec(tmp_path, [], hosts="sim[01-02]", stages=["preflight"]))
    data = yaml.safe_load(spec.read_text())
    data["slurm"] = {"conf": str(slurm_dir / "slurm.conf")}
    # on a real node the job runs `provision-node-check --drain` as the role installed it; here it enters the
    # simulated host first (as the health-check program of tests/sinks/test_slurm.py does) and names this test's
    # slurm.conf, so node-check reads that node's own root, tools and check file
    data["watch"] = {"revalidate": {
        "every": "1h", "partition": "revalidate", "per_pass": 2, "time_limit_minutes": 5,
        "command": f'{sys.executable} -m provision sim shell {spec} "$SLURMD_NODENAME" -- env '
                   f"SLURM_CONF={slurm_dir / 'slurm.conf'} {sys.executable} -m provision node-check --drain"}}
    # the nodes' BMCs, for the ladder's power cycle
    data["nodes"]["groups"][0]["bmc_address_start"] = "127.0.0.1"
    data["bmc"] = {"scheme": "http", "port": redfish.free_port("127.0.0.1"), "timeout_s": 40,
                   "credentials": {"username": {"file": "bmc-user"}, "password": {"file": "bmc-password"}}}
    (tmp_path / "bmc-user").write_text("admin\n")
    (tmp_path / "bmc-password").write_text(BMC_PASSWORD + "\n")
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    state = tmp_path / ".provision" / "sim16"
    extra = "PreemptType=preempt/partition_prio\nPreemptMode=CANCEL"
    with slurmcluster.running(slurm_dir, HOSTS, extra=extra, partitions=PARTITIONS) as cluster, \
            redfish.serving_spec(spec, len(HOSTS), {}):
        burned = provision_then_burn_in(spec)
        assert {row["state"] for row in burned["nodes"].values()} == {"admitted"}, burned["nodes"]
        loaded = load_spec(spec)
        identity = SpecIdentity(spec.resolve(), loaded.sha256)
        with mutating_run(state, "watch", ["watch"], spec=identity) as run:  # just admitted: nobody is due
            assert revalidation_pass(loaded, run, client_for(loaded), now=time.time()).submitted == {}
        # a one-off: the GPU fell off the bus, and a power cycle brings it back (the boot's log holds no Xid)
        inject_now(node_paths(state, "sim02").root.parent, "xid", "gpu1", {"code": 79, "after_boot": "cleared"})
        # slurmctld flags a node NOT_RESPONDING around its pings half a minute after slurmd registered (a node not
        # free, which a revalidation passes over): the pass below is of nodes Slurm calls plainly idle
        cluster.wait(lambda: cluster.scontrol("-o", "show", "node").stdout.count("State=IDLE ") == len(HOSTS),
                     "every node plainly idle", timeout_s=60)
        later = time.time() + 2 * HOUR
        with mutating_run(state, "watch", ["watch"], spec=identity) as run:
            first = revalidation_pass(loaded, run, client_for(loaded), now=later)
        assert sorted(first.submitted) == HOSTS and not first.problems, first
        _ended(cluster, list(first.submitted.values()))
        with mutating_run(state, "watch", ["watch"], spec=identity) as run:
            second = one_pass(loaded, run, state, now=later + 60)
        reasons = cluster.sinfo_reasons()
        # the next rung, by `provision watch --once`, killed -9 once the power cycle has brought the host back
        # and before its re-validation is recorded; the next `--once` judges the node without cycling it again
        sim02_root = node_paths(state, "sim02").root
        boots = load_state(sim02_root)["boot_count"]
        killed = _watch_killed_after_the_boot(spec, state, sim02_root, boots)
        third = run_cli("watch", str(spec), "--once", "--json", timeout=300)
        returned = cluster.sinfo_reasons()
        sim02_in_slurm = cluster.scontrol("-o", "show", "node", "sim02").stdout
        preemption_s, revalidation_end = _a_user_job_takes_a_node_a_revalidation_holds(cluster, loaded)
    assert second.revalidation is not None
    assert {end.node: end.verdict for end in second.revalidation.ended} == {"sim01": PASSED, "sim02": FAILED}
    # node-check's drain, read back; the sync at the pass's end wrote the store's reason, which the ladder's failed
    # rung left as it was
    assert reasons["sim02"].startswith("provision: node-check/xid: Xid 79"), reasons
    with StateStore(state) as store:
        sim01 = store.node("sim01")
        assert sim01 is not None and sim01.state is NodeState.ADMITTED
        assert [row["verdict"] for row in store.revalidations("sim01")] == [PASSED]
        assert store.last_revalidated()["sim01"] == later
        # read back from its drain at stage node-check with the check; the same pass's ladder then took the GPU
        # ladder's first rung, a reset, which a GPU that fell off the bus (Xid 79) refuses: the step failed with the
        # tool's words, and the node stayed quarantined for the next rung
        episode = store.watch_episode("sim02")
        assert episode is not None
        reset = store.attempts("sim02", episode)[0]
        assert (reset["step"], reset["outcome"]) == ("gpu_reset", "failed") and "GPU is lost" in reset["detail"]["step"]
    # the next pass: the GPU ladder's second rung, the BMC's power cycle; the boot's log holds no Xid, the node's
    # own checks pass, it is returned, and the sync resumes it in Slurm
    # a user's job asked for a node a revalidation held: Slurm cancelled the revalidation (the low tier) and ran
    # the job; the watch reads that end as preempted, never as a verdict (docs/watch.md: 2.8 s measured by hand)
    assert preemption_s < 30, preemption_s
    assert (revalidation_end.verdict, revalidation_end.node) == (PREEMPTED, "sim01"), revalidation_end
    assert killed == "killed mid-ladder", killed
    assert third.returncode == 0, third.stdout + third.stderr
    ladder = json.loads(third.stdout)["ladder"]
    assert [(row["node"], row["action"], row["step"], row["outcome"]) for row in ladder] == [
        ("sim02", "revalidate", "power_cycle", "returned")], ladder
    assert "not repeated" in ladder[0]["why"]
    assert load_state(sim02_root)["boot_count"] == boots + 1, "one power cycle, not two"
    assert "sim02" not in returned, returned
    assert "State=IDLE" in sim02_in_slurm and "DRAIN" not in sim02_in_slurm, sim02_in_slurm
    with StateStore(state) as store:
        moves = [(row["to_state"], row["stage"]) for row in store.history("sim02")]
        assert moves[-3:] == [("quarantined", "node-check"), ("burning-in", "revalidate"), ("admitted", None)], moves
        episode = store.watch_episode("sim02")
        assert episode is not None
        assert [(row["step"], row["outcome"]) for row in store.attempts("sim02", episode)] == [
            ("gpu_reset", "failed"), ("power_cycle", "passed")]
        assert store.attempts("sim02", episode)[1]["detail"]["step"] == "the step's outcome was not recorded"


def _watch_killed_after_the_boot(spec: Path, state: Path, root: Path, boots: int) -> str:
    """`provision watch --once` started, and killed -9 while the node's power cycle is recorded as started and the
    host has booted (its re-validation under way): what was seen."""
    watch = subprocess.Popen([sys.executable, "-m", "provision", "watch", str(spec), "--once"], cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline:
            if watch.poll() is not None:
                return f"the pass ended first (exit {watch.returncode}): {watch.stderr.read()[-2000:]!r}"  # type: ignore[union-attr]
            with StateStore(state) as store:
                episode = store.watch_episode("sim02")
                started = episode is not None and [row["step"] for row in store.attempts("sim02", episode)
                                                   if row["outcome"] == "started"] == ["power_cycle"]
            if started and load_state(root)["boot_count"] > boots:
                os.killpg(watch.pid, signal.SIGKILL)
                return "killed mid-ladder"
            time.sleep(0.05)
        return "no power cycle seen within 180 s"
    finally:
        if watch.poll() is None:
            os.killpg(watch.pid, signal.SIGKILL)
        watch.wait(timeout=30)


def _job_state(cluster: slurmcluster.SlurmCluster, job_id: str) -> str:
    shown = cluster.scontrol("-o", "show", "job", job_id, check=False).stdout
    return shown.split("JobState=", 1)[1].split()[0] if "JobState=" in shown else "?"


def _a_user_job_takes_a_node_a_revalidation_holds(cluster: slurmcluster.SlurmCluster,
                                                  loaded: LoadedSpec) -> tuple[float, JobEnd]:
    """A revalidation job as the watch submits it, holding sim01 (a `sleep 300` in place of its checks), then a
    user's job on sim01 in the default partition: the seconds until the user's job ran, and the revalidation's
    end as the watch reads it."""
    client = client_for(loaded)
    held = client.submit(job_argv("revalidate", "sim01", 5, "sleep 300"))
    cluster.wait(lambda: _job_state(cluster, held) == "RUNNING", "the revalidation runs", timeout_s=60)
    asked = time.monotonic()
    user = subprocess.run(["sbatch", "--parsable", "-p", "batch", "-w", "sim01", "-t", "1", "--chdir=/tmp",
                           "--output=/dev/null", "--wrap", "sleep 1"], env=cluster.env, capture_output=True,
                          text=True, timeout=30, check=True).stdout.strip().split(";")[0]
    cluster.wait(lambda: _job_state(cluster, user) in ("RUNNING", "COMPLETING", "COMPLETED"), "the user's job runs",
                 timeout_s=60)
    took = time.monotonic() - asked
    cluster.wait(lambda: _job_state(cluster, held) not in ("RUNNING", "COMPLETING"), "the revalidation ends",
                 timeout_s=60)
    [end] = read_ends(client.jobs(), {held: "sim01"})
    return took, end
