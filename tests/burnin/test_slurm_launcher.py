"""The burn-in as Slurm jobs: ``burnin.launcher: slurm`` starts each stage's agents with one ``srun`` (a task per
node, inside a maintenance reservation the pipeline creates for the candidates and removes after). With the
example's five burn-in faults it reaches the verdicts the session launcher reaches on them — each fault caught by
the stage and check its catalog entry names, which the session-launcher tests (test_burnin_preflight,
test_burnin_multinode, test_burnin_training) assert for the same kinds — and Slurm drains exactly the quarantined
nodes with our reasons.

slurmd runs every simulated host's tasks on this machine; a TaskProlog — part of the simulated hardware, as the
tools at real paths are on a node — puts the host's own tools (its ``python3``, with the rank-fault shim) first
on the task's PATH.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from provision.sim.cluster import node_paths
from provision.spec.faults import CATALOG
from tests import slurmcluster
from tests.conftest import example_text
from tests.simhelpers import provision_then_burn_in, shrink_to_four_gpus, write_spec
from topology import hostlist

HOSTS = hostlist.expand("sim[01-06]")
STAGES = ["preflight", "node", "collectives", "training"]  # the stages that start workers, through srun
# the example's burn-in faults, each moved to a host of this smaller cluster; sim06 alone stays healthy: the
# corrupting rank's group testing has one healthy pair (sim05, whose fault strikes only in training, and sim06)
# to confirm it against — with a one-node pass taken as health it once blamed both
EXAMPLE_NODES = {"sim07": "sim01", "sim09": "sim02", "sim12": "sim03", "sim13": "sim04", "sim14": "sim05"}


def _example_burnin_faults() -> list[dict]:
    faults = yaml.safe_load(example_text())["simulation"]["faults"]
    chosen = [dict(fault, node=EXAMPLE_NODES[fault["node"]]) for fault in faults
              if fault.get("node") and CATALOG[fault["kind"]].stage in STAGES]
    assert sorted(fault["node"] for fault in chosen) == sorted(EXAMPLE_NODES.values())
    for fault in chosen:
        if fault.get("target", "").startswith("gpu") and int(fault["target"][3:]) > 3:
            fault["target"] = "gpu1"  # four GPUs a host here
    return chosen


@pytest.mark.skipif(not slurmcluster.available(), reason=slurmcluster.MISSING)
def test_the_example_faults_burned_in_by_srun_get_their_stage_and_check(tmp_path: Path) -> None:
    faults = _example_burnin_faults()
    slurm_dir = tmp_path / "slurm"
    spec = shrink_to_four_gpus(write_spec(tmp_path, faults, hosts="sim[01-06]",
                                          stages=STAGES,
                                          admission={"max_failure_percent": {"burnin": 100}}))
    data = yaml.safe_load(spec.read_text())
    data["burnin"]["launcher"] = "slurm"
    data["slurm"] = {"conf": str(slurm_dir / "slurm.conf")}
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    state = tmp_path / ".provision" / "sim16"
    prolog = tmp_path / "task-prolog.sh"
    prolog.write_text("#!/bin/sh\n# the simulated host's own tools first, as they are at the real paths of a node\n"
                      'case "$SLURMD_NODENAME" in\n'
                      + "".join(f'  {host}) echo "export PATH={node_paths(state, host).bin}:$PATH" ;;\n'
                                for host in HOSTS) + "esac\n")
    prolog.chmod(0o755)
    with slurmcluster.running(slurm_dir, HOSTS, extra=f"TaskProlog={prolog}") as cluster:
        outcome = provision_then_burn_in(spec)
        reasons = cluster.sinfo_reasons()
        reservations = cluster.scontrol("show", "reservation").stdout
        jobs = cluster.scontrol("show", "job").stdout
    nodes = outcome["nodes"]
    expected = {fault["node"]: (CATALOG[fault["kind"]].stage, CATALOG[fault["kind"]].check) for fault in faults}
    assert {name: (row["stage"], row["check"]) for name, row in nodes.items()
            if row["state"] == "quarantined"} == expected
    assert {name for name, row in nodes.items() if row["state"] == "admitted"} == {"sim06"}
    assert set(reasons) == set(expected)
    for name, (stage, check) in expected.items():
        assert reasons[name].startswith(f"provision: {stage}/{check}: "), reasons[name]
    assert "No reservations" in reservations, reservations
    for test in ("node", "collectives", "training"):
        assert f"JobName=provision-{test}-" in jobs, f"no {test} launch went through srun"
