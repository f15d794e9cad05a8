"""``provision triage --job`` end to end (issue 54): a training job launched through a real Slurm on the simulated
cluster (four admitted nodes, one task each, torch.distributed over gloo on loopback) loses a GPU mid-job — sim03
logs Xid 79 and its rank dies as the driver kills it — and the others fail on the lost peer. Triage reads what
Slurm holds of the job and the nodes' kernel logs over its window, names sim03, and ``--drain`` quarantines it at
stage ``job`` and drains it in Slurm with the job's id; the healthy three stay in service."""

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

from provision.sim import cluster as sim_cluster
from provision.sim.host import inject_now
from tests import slurmcluster
from tests.conftest import run_cli
from tests.simhelpers import provision_then_burn_in, shrink_to_four_gpus, write_spec
from topology import hostlist

HOSTS = hostlist.expand("sim[01-04]")
#: A data-parallel loop of a few hundred steps, each rank a process on its own node: every step all-reduces a
#: gradient-sized tensor, as DDP does, and rank 0 prints its progress. A rank that dies leaves the others' next
#: all_reduce failing on the lost peer.
TRAIN = """
import datetime, os, time
from pathlib import Path
import torch
import torch.distributed as dist
rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{os.environ['TRAIN_PORT']}", rank=rank,
                        world_size=world, timeout=datetime.timedelta(seconds=60))
Path(os.environ["PIDS"], os.environ["SLURMD_NODENAME"]).write_text(str(os.getpid()))
weights = torch.ones(1 << 16)
for step in range(2000):
    grad = torch.full_like(weights, 1.0 / world)
    dist.all_reduce(grad)
    weights -= 0.01 * grad
    if rank == 0 and step % 100 == 0:
        print(f"step {step} loss {float(weights.mean()):.4f}", flush=True)
    time.sleep(0.05)
dist.destroy_process_group()
"""


def _wait(what: str, check, limit_s: float):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {limit_s:g} s")


@pytest.mark.skipif(not slurmcluster.available(), reason=slurmcluster.MISSING)
def test_a_job_that_lost_a_gpu_names_its_node_and_drain_takes_it_out(tmp_path: Path) -> None:
    slurm_dir = tmp_path / "slurm"
    spec = shrink_to_four_gpus(write_spec(tmp_path, [], hosts="sim[01-04]", stages=["preflight"]))
    data = yaml.safe_load(spec.read_text())
    data["slurm"] = {"conf": str(slurm_dir / "slurm.conf")}
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    state = tmp_path / ".provision" / "sim16"
    pids = tmp_path / "pids"
    pids.mkdir()
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    with slurmcluster.running(slurm_dir, HOSTS) as slurm:
        port = slurmcluster.free_range(1)  # chosen once Slurm holds its ports: before, it was slurmctld's own
        burned = provision_then_burn_in(spec)
        assert {row["state"] for row in burned["nodes"].values()} == {"admitted"}, burned["nodes"]
        submitted = subprocess.run(
            ["sbatch", "--parsable", "-N", "4", "--ntasks-per-node=1", "-o", str(tmp_path / "job-%j.out"),
             "--export", f"ALL,PIDS={pids},TRAIN_PORT={port}",
             "--wrap", f"srun --label {sys.executable} {script}"],
            env=slurm.env, capture_output=True, text=True, timeout=30)
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.strip().split(";")[0]
        _wait("every rank started", lambda: len(list(pids.iterdir())) == 4, 240)
        time.sleep(2)  # a few steps in
        # the GPU falls off the bus: the driver logs Xid 79 and the process using it dies
        inject_now(sim_cluster.node_paths(state, "sim03").root.parent, "xid", "gpu1", {"code": 79})
        os.kill(int((pids / "sim03").read_text()), signal.SIGKILL)

        def ended() -> str:
            line = slurm.scontrol("-o", "show", "job", job_id).stdout
            value = line.split("JobState=", 1)[1].split()[0]
            return value if value not in ("RUNNING", "PENDING", "COMPLETING") else ""

        assert _wait("the job ended", ended, 180) == "FAILED"
        read = run_cli("triage", "--job", job_id, "--spec", str(spec), "--json", timeout=120)
        assert read.returncode == 0, read.stdout + read.stderr
        found = json.loads(read.stdout)
        strong = {culprit["who"] for culprit in found["culprits"] if culprit["strength"] == "strong"}
        assert strong == {"sim03"}, found
        assert any("79" in why for culprit in found["culprits"] if culprit["who"] == "sim03"
                   for why in culprit["why"]), found
        assert found["job"]["job"]["nodes"] == HOSTS and not found["job"]["missing"], found["job"]
        assert found["drained"] is None and "drain sim03 first" in found["requeue"]
        assert slurm.sinfo_reasons() == {}  # reading changed nothing in Slurm
        drained = run_cli("triage", "--job", job_id, "--spec", str(spec), "--drain", "--json", timeout=120)
        assert drained.returncode == 0, drained.stdout + drained.stderr
        result = json.loads(drained.stdout)
        assert result["drained"]["drained"] == ["sim03"], result
        reasons = slurm.sinfo_reasons()
    assert set(reasons) == {"sim03"} and reasons["sim03"].startswith(f"provision: job {job_id}: "), reasons
    status = json.loads(run_cli("status", str(spec), "--json", timeout=60).stdout)
    states = {row["name"]: (row["state"], row["stage"]) for row in status["nodes"]}
    assert states["sim03"] == ("quarantined", "job") and states["sim01"][0] == "admitted", states
