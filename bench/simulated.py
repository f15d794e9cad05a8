"""Driving the simulated cluster from a benchmark: the real `provision` CLI in a subprocess, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sim-cluster.yaml"


def example() -> dict[str, Any]:
    """The example cluster's spec, as data to vary."""
    keys = EXAMPLE.parent / "keys"
    return yaml.safe_load(EXAMPLE.read_text().replace("key: keys/", f"key: {keys}/"))


def shrink_to_four_hosts(data: dict[str, Any]) -> dict[str, Any]:
    """The example cut to 4 hosts of 4 GPUs and 4 rails: the size of a benchmark's ``--quick`` run."""
    data["nodes"]["groups"][0]["hosts"] = "sim[01-04]"
    data["hardware"]["hgx-h100"]["gpu"]["count"] = 4
    data["hardware"]["hgx-h100"]["rails"] = {"mlx5_0": 0, "mlx5_3": 1, "mlx5_4": 2, "mlx5_5": 3}
    data["fabric"]["rails"] = 4
    return data


def write_spec(directory: Path, data: dict[str, Any]) -> Path:
    path = directory / "cluster.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def provision_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "provision", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=1800, check=False)


def provision_then_burn_in(spec: Path) -> tuple[dict[str, Any], float, int]:
    """``apply`` up to provisioning, then ``burnin --json``: its payload, wall seconds and exit code."""
    provisioned = provision_cli("apply", str(spec), "--phases", "simulate,register,provision", cwd=spec.parent)
    if provisioned.returncode not in (0, 1):
        raise SystemExit(f"provisioning failed: {provisioned.stderr[-2000:]}")
    started = time.perf_counter()
    burned = provision_cli("burnin", str(spec), "--json", cwd=spec.parent)
    return json.loads(burned.stdout), time.perf_counter() - started, burned.returncode


def quarantined(payload: dict[str, Any]) -> dict[str, str]:
    """Quarantined node -> reason, from a ``burnin --json`` payload."""
    return {row["node"]: row["reason"] for row in payload["nodes"] if row["state"] == "quarantined"}
