"""Shared test helpers: paths into the repository and a way to run the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
BROKEN = Path(__file__).resolve().parent / "specs" / "broken"
SHARED_FIXTURES = ROOT.parent / "shared" / "fixtures"


def run_cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``provision`` as a user would: a separate process, real exit code."""
    return subprocess.run([sys.executable, "-m", "provision", *args], cwd=cwd or ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {}), "COLUMNS": "200"})


@pytest.fixture
def sim_spec(tmp_path: Path) -> Path:
    """A private copy of the simulated example, so its state lands in tmp_path."""
    target = tmp_path / "sim-cluster.yaml"
    target.write_text((EXAMPLES / "sim-cluster.yaml").read_text())
    return target
