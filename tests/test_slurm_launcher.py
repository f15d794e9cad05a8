"""The burn-in as Slurm jobs: ``burnin.launcher: slurm`` starts each stage's agents with one ``srun`` (a task per
node, inside a maintenance reservation the pipeline creates for the candidates and removes after) and reaches the
same verdicts as the session launcher on the same faults; Slurm then drains exactly the quarantined nodes.

slurmd runs every simulated host's tasks on this machine; a TaskProlog — part of the simulated hardware, as the
tools at real paths are on a real node — puts the host's own tools (its ``python3``, with the rank-fault shim)
first on the task's PATH.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from provision.sim.cluster import node_paths
from tests import slurmcluster
from tests.simhelpers import provision_then_burn_in, shrink_to_four_gpus, write_spec
from topology import hostlist

HOSTS = hostlist.expand("sim[01-04]")
FAULTS = [
    {"kind": "slow_gpu", "node": "sim02", "target": "gpu1", "params": {"factor": 0.5}},
    {"kind": "rank_hang", "node": "sim04", "params": {"local_rank": 1, "after_ops": 5}},
]


def _verdicts(outcome: dict) -> dict[str, tuple[str, str | None, str | None]]:
    return {name: (row["state"], row["stage"], row["check"]) for name, row in outcome["nodes"].items()}


@pytest.mark.skipif(not slurmcluster.available(), reason=slurmcluster.MISSING)
def test_the_slurm_launcher_reaches_the_same_verdicts_as_sessions(tmp_path: Path) -> None:
    (tmp_path / "ssh").mkdir()
    spec = shrink_to_four_gpus(write_spec(tmp_path / "ssh", FAULTS, hosts="sim[01-04]",
                                          stages=["node", "collectives"],
                                          admission={"max_failure_percent": {"burnin": 100}}))
    by_sessions = provision_then_burn_in(spec)

    (tmp_path / "srun").mkdir()
    slurm_dir = tmp_path / "slurm"
    data = yaml.safe_load(spec.read_text())
    data["burnin"]["launcher"] = "slurm"
    data["slurm"] = {"conf": str(slurm_dir / "slurm.conf")}
    srun_spec = tmp_path / "srun" / "spec.yaml"
    srun_spec.write_text(yaml.safe_dump(data, sort_keys=False))
    state = tmp_path / "srun" / ".provision" / "sim16"
    prolog = tmp_path / "task-prolog.sh"
    prolog.write_text("#!/bin/sh\n# the simulated host's own tools first, as they are at the real paths of a node\n"
                      'case "$SLURMD_NODENAME" in\n'
                      + "".join(f'  {host}) echo "export PATH={node_paths(state, host).bin}:$PATH" ;;\n'
                                for host in HOSTS) + "esac\n")
    prolog.chmod(0o755)
    with slurmcluster.running(slurm_dir, HOSTS, extra=f"TaskProlog={prolog}") as cluster:
        by_srun = provision_then_burn_in(srun_spec)
        reasons = cluster.sinfo_reasons()
        reservations = cluster.scontrol("show", "reservation").stdout
        accounting = cluster.scontrol("show", "job").stdout
    assert _verdicts(by_srun) == _verdicts(by_sessions)
    quarantined = {name for name, row in by_srun["nodes"].items() if row["state"] == "quarantined"}
    assert quarantined == {"sim02", "sim04"}
    assert set(reasons) == quarantined
    for name in quarantined:
        assert reasons[name].startswith(f"provision: {by_srun['nodes'][name]['stage']}/"), reasons
    assert "No reservations" in reservations, reservations
    assert "JobName=provision-node-" in accounting and "JobName=provision-collectives-" in accounting
