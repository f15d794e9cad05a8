"""Driving the simulated cluster from a benchmark: the real `provision` CLI in a subprocess, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


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
