"""Small simulated clusters for tests: a spec with chosen faults, brought up, and its hosts' tools."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from provision.sim import cluster
from provision.spec import load_spec
from tests.conftest import EXAMPLES


def write_spec(directory: Path, faults: list[dict], *, hosts: str = "sim[01-02]", seed: int = 3,
               stages: list[str] | None = None, admission: dict | None = None,
               collective_semantics: str = "gloo") -> Path:
    data = yaml.safe_load((EXAMPLES / "sim-cluster.yaml").read_text())
    data["nodes"]["groups"][0]["hosts"] = hosts
    if stages is not None:
        data["burnin"]["stages"] = stages
    if admission is not None:
        data["admission"] = admission
    data["simulation"] = {"seed": seed, "faults": faults, "collective_semantics": collective_semantics}
    path = directory / "spec.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


class SimHost:
    """Run a simulated host's tools the way a playbook or check would: by name, through PATH."""

    def __init__(self, state_dir: Path, host: str) -> None:
        self.paths = cluster.node_paths(state_dir, host)
        cluster.materialize(state_dir, [host])
        self.root = self.paths.root

    def run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(list(command), env=cluster.environment(self.paths), capture_output=True, text=True,
                                timeout=60, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"{command} exited {result.returncode}: {result.stderr}")
        return result


def bring_up(directory: Path, faults: list[dict], **kwargs) -> tuple[Path, dict]:
    spec = write_spec(directory, faults, **kwargs)
    state_dir = directory / "state"
    manifest = cluster.up(load_spec(spec), state_dir)
    return state_dir, manifest


def shrink_to_four_gpus(spec: Path, **workload: int | str) -> Path:
    """Four GPUs and four rails a host (keeps multi-node tests quick on two cores), plus workload overrides."""
    data = yaml.safe_load(spec.read_text())
    data["hardware"]["hgx-h100"]["gpu"]["count"] = 4
    data["hardware"]["hgx-h100"]["rails"] = {"mlx5_0": 0, "mlx5_3": 1, "mlx5_4": 2, "mlx5_5": 3}
    data["fabric"]["rails"] = 4
    data["burnin"]["workload"].update(workload)
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return spec


def provision_then_burn_in(spec: Path) -> dict:
    """``apply`` up to provisioning, then ``burnin --json``: its exit code, payload, run directory and nodes."""
    from tests.conftest import run_cli

    applied = run_cli("apply", str(spec), "--phases", "simulate,register,provision", timeout=600)
    assert applied.returncode == 0, applied.stderr
    result = run_cli("burnin", str(spec), "--json", timeout=600)
    assert result.stdout, result.stderr
    payload = json.loads(result.stdout)
    return {"spec": spec, "rc": result.returncode, "payload": payload, "run_dir": Path(payload["run_dir"]),
            "nodes": {row["node"]: row for row in payload["nodes"]}}
