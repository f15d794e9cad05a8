"""Where a simulated cluster keeps its files under a state directory (importable without the simulator)."""

from __future__ import annotations

from pathlib import Path


def sim_dir(state_dir: Path) -> Path:
    """The simulated cluster's folder: hosts, fabric, UFM history."""
    return state_dir / "sim"


def fabric_dir(state_dir: Path) -> Path:
    """The simulated fabric's dump, day of UFM events and counter snapshots."""
    return sim_dir(state_dir) / "fabric"
